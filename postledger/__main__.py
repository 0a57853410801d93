from postledger.cli import app

app(prog_name="postledger")
