"""The Tinker API on aloft: ``aloft tinker-serve`` serves the wire protocol of the official ``tinker``
SDK (0.38) over aloft's own training pieces, so a loop written against Tinker runs on this machine.

Modules: ``server`` (the routes and the session state), ``futures`` (accepted operations and the
long-polled ``retrieve_future``), ``training`` (LoRA training clients sharing one base model, each with
its own AdamW), ``losses`` (the losses Tinker names), ``wire`` (the protobuf messages), ``errors``.
Needs the ``tinker`` extra: ``pip install 'aloft[tinker]'``.
"""
