"""Speed profiles: the model, its strict YAML schema, and fitting one to recorded traffic.
Sans-io but for the one loader (`retimer.profile.model.load_profile`) that reads profile files."""
