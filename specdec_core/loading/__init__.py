"""Loading: a model spec (an embedded name, a folder, a GGUF file, a Hub id) becomes a model on a device.

Owns resolving specs (`specs`), GGUF conversion and its on-disk cache (`gguf_cache`, `gguf_types`), the
installable catalog (`catalog`), load progress (`progress`), weight checks, where shipped files and memory
figures are (`resources`, `memory`) and the CPU backend the loader applies (`cpu_speed`, `cpu_attention`).
Our own two draft architectures live here too (`draft_head`, `draft_model`): they are models the loader
registers with transformers before a load, which the drafters above then run. May import the root vocabulary
(config, defaults, errors) only.
"""
