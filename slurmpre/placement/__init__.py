"""Where a run trains: preemptible or standard nodes, by its deadline and its budgets."""
