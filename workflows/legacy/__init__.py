"""Workflow versions that allocations started by an earlier gpuprov may still be running.

They stay registered, unchanged, so those runs finish exactly as they began (Temporal replays
them against this code): AllocateWorkflow ends at ready; TerminateWorkflow cancels it or tears the
machine down. New allocations run AllocationWorkflow (workflows/allocation.py), one long-lived
workflow per machine. Do not edit these files except to fix imports; the replay tests
(tests/workflows/histories/v1, v2) guard them. Remove them once no such run is open.
"""
