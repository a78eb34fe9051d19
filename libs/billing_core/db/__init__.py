"""PostgreSQL access: the schema (tables) and the engine/session factory (engine)."""
