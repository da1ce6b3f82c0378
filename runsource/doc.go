// Package runsource is the one path by which a node-agent gets what a run's
// spec names from Secrets and ConfigMaps: the selected Secret keys
// (spec.agent.credentials) and the fixture ConfigMap (spec.fixture.configMapRef).
//
// A node-agent holds no right to read Secrets or ConfigMaps. The controller
// does (scoped to the run namespaces by its RBAC), and serves them over HTTPS
// (Server) to the node-agent that claimed the run (Client), only:
//
//   - to a caller whose bearer token the API server authenticates (a
//     TokenReview) for the audience Audience, as one of the node-agent
//     service accounts;
//   - for the node the API server vouches for: the node claim a pod-bound or
//     node-bound token carries (authentication.kubernetes.io/node-name), or
//     the node an operator assigned to an unbound account (a node-agent run
//     outside a pod, `harnessfacts dev`);
//   - for a run bound to that node (status.nodeName), claimed (phase Running,
//     the attempt asked for) and not being deleted, with the UID the caller
//     names;
//   - and only what that run's spec names.
//
// Every later need of a node-agent for a Secret (image pull secrets, git
// credentials, the evidence signing key) comes through here too: no feature
// may give the node-agent a standing read.
package runsource
