"""splitrpc.services.fleet: the running fleet on Ray, after Hercules (Ke et al., HPCA 2022): a local cluster on 127.0.0.1 with simulated nodes of server kinds, replicas of `splitrpc serve`, the controller that follows a plan, the directory of live replicas a splitrpc.Pool reads, and `splitrpc fleet up|status|down`.

Needs the `fleet` extra (Ray); importing this package needs nothing beyond numpy.
"""
