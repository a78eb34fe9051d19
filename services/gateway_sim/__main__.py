from services.gateway_sim.main import main

if __name__ == "__main__":
    main()
