"""Units of work shared by the processes; each takes a session and never commits."""
