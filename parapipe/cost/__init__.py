"""The cost model: a mapping problem (blocks x PUs: times, powers, bytes; :mod:`.problem`), the index form of a
mapping (:mod:`.mapping`), its structural rules (:mod:`.rules`), the task split rule (:mod:`.tasks`), the roofline
(:mod:`.roofline`) and the one evaluation of period, latency and energy per inference (:mod:`.evaluate`). Pure:
no I/O, no ONNX Runtime."""
