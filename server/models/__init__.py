"""splitrpc.services.models: the model zoo (LeNet, LSTM, ResNet-18/50, BERT-like) as splitrpc tensor functions.

Importing this package needs only numpy: the table (MODELS, specs, example requests) is
available everywhere. Building a model (ModelInfo.build, register_models, reference,
check_reply) needs PyTorch: ``pip install 'splitrpc[models]'``.

    from splitrpc.services.models import MODELS, register_models, check_reply
    register_models(server, "lenet,bert-like", device="cpu", small=False, max_batch=8)

Random weights from a fixed seed (nothing is downloaded): replies are deterministic for a seed
but mean nothing. func_ids 10-14 (the built-in services are 1-4).
"""
from splitrpc.services.models.registry import (MODELS, RTOL, ModelInfo, check_reply, reference, register_models,
                                               resolve, run_batch, split)

__all__ = ["MODELS", "RTOL", "ModelInfo", "check_reply", "reference", "register_models", "resolve", "run_batch",
           "split"]
