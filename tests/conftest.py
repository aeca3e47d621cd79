pytest_plugins = ["tests.registry"]
