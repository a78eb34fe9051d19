from services.collector.main import main

main()
