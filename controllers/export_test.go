package controllers

// WaitingRunsForBench is how many runs the ledger holds as waiting, looked
// through as a wake does (BenchmarkCreateToScheduled times it).
func (r *HarnessRunReconciler) WaitingRunsForBench() int { return len(r.ledger.waitingRuns()) }
