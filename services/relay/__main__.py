from services.relay.main import main

main()
