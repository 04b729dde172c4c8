from troupe.client.cli.main import app

app()
