"""The local demo (`make run`): the top of the house; it may import every app, and no app imports it."""
