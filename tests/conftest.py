pytest_plugins = ["tests.registry", "tests.kube"]
