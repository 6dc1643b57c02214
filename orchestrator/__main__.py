from orchestrator.app import main

main()
