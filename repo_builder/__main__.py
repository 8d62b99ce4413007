from repo_builder.cli import main

main()
