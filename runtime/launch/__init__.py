"""The local executor: runs a whole GraphTraining on one machine as processes."""
