from services.renewer.main import main

main()
