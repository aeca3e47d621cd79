"""Run by the Dynamo bed's own Python (its environment has numpy and pyzmq; stackpin's need not), as a
script: it imports nothing from stackpin.

    python dynamo_helper.py table IN.json OUT.npz   the mocker's --planner-profile-data from a JSON table
    python dynamo_helper.py broker                  a loopback ZMQ XSUB/XPUB proxy; prints its two ports

The broker keeps Dynamo's event plane on loopback: its mocker binds its own publishers on 0.0.0.0
unless every process publishes and subscribes through a broker (DYN_ZMQ_BROKER_URL).
"""

from __future__ import annotations

import json
import sys


def table(source: str, target: str) -> None:
    import numpy as np

    with open(source, encoding="utf-8") as f:
        data = json.load(f)
    arrays = {key: np.asarray(value, dtype=np.float64) for key, value in data.items()}
    np.savez(target, **arrays)  # type: ignore[arg-type]  # numpy's stub types the first keyword


def broker() -> None:
    import zmq  # type: ignore[import-not-found]  # the bed's environment has it, stackpin's need not

    context = zmq.Context()
    xsub = context.socket(zmq.XSUB)
    xpub = context.socket(zmq.XPUB)
    ports = (xsub.bind_to_random_port("tcp://127.0.0.1"), xpub.bind_to_random_port("tcp://127.0.0.1"))
    print(*ports, flush=True)
    zmq.proxy(xsub, xpub)


if __name__ == "__main__":
    if sys.argv[1:2] == ["table"] and len(sys.argv) == 4:
        table(sys.argv[2], sys.argv[3])
    elif sys.argv[1:] == ["broker"]:
        broker()
    else:
        sys.exit(f"usage: {sys.argv[0]} table IN.json OUT.npz | broker")
