"""What a run will need before it runs: memory per rank and host (the ledger, its terms and levels), the
communication volume per scheme, the step-time floor, and the plan that sets them against a machine."""
