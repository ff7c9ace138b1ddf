from servecheck.cli.main import main

main()
