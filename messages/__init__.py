"""Typed messages between the API, workflows and activities: pure pydantic, no I/O.

It sits below `workflows/` and `activities/`: both import it, it imports neither (only the
contract's models in providers/base.py). It is the one gpuprov package the workflow sandbox
passes through, together with the contract's models and pydantic.
"""
