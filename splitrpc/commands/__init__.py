"""splitrpc.commands: the core's own subcommands of `splitrpc`, one module each (serve, call, describe, demo); the capabilities add theirs through splitrpc.plugins."""
