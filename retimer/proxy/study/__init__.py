"""The hosted-study shell: the Study addon (conditions for flows, the rating page), the study
page (a participant's chat, tasks and ratings), the state they share (in memory or PostgreSQL)
and the study file's loader. The study's pure logic is `retimer.study`'s."""
