"""A cloud added from outside gpuprov: one adapter module, one simulation facade module and two
entry points in this package's metadata — `gpuprov.clouds` names ENTRY (the product's registry
entry: the adapter), `gpuprov.simulations` names the facade (the simulation's list of clouds).

tests/test_new_cloud.py and tests/e2e/test_make_run.py install it by putting this folder and a
`.dist-info` on PYTHONPATH and check it appears in `make run`, the API's cloud enum, the CLI and the
conformance suite with no other edit anywhere.
"""

from providers.registry import CloudEntry

ENTRY = CloudEntry("democloud", "gpuprov_democloud.adapter:DemoProvider")
