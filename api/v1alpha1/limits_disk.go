package v1alpha1

// DefaultDisk is limits.disk when neither the run nor its fixture sets it:
// small enough that a few runs' files fit in a node's memory next to their
// processes (a tmpfs is memory), large enough for a repository checkout and
// its dependencies.
const DefaultDisk = "1Gi"
