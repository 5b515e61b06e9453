"""plugin_broken.py: a plug-in module that fails while it is imported (tests/test_plugins.py): the command says so in one line."""
raise RuntimeError("this plug-in cannot start")
