from retimer.cli.main import main

main()
