from services.notifier.main import main

main()
