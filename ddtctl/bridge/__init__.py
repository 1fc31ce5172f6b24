"""Bridge to SGLang's own resolver. Everything that imports sglang lives in resolver_worker.py and runs in a
subprocess of the managed env's python (ddtctl/envs.py), never in the ddtctl process."""
