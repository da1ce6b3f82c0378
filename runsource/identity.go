package runsource

import (
	"context"
	"fmt"
	"slices"

	authnv1 "k8s.io/api/authentication/v1"
)

// NodeNameExtra is the user-info extra in which the API server puts the node
// of a token bound to a Pod (the pod's spec.nodeName) or to a Node.
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// Identity is who asks: a node-agent account and the node it speaks for.
type Identity struct {
	User string
	Node string
}

// Accounts says which callers are node-agents, and how their node is known.
type Accounts struct {
	// Bound are the usernames (system:serviceaccount:NS:NAME) of node-agents
	// whose node is the node claim of their token: a token bound to the
	// node-agent's Pod (what the kubelet projects) or to a Node. A token of
	// these accounts without a node claim is refused.
	Bound []string
	// Unbound maps a username to the one node it speaks for, whatever its
	// token is bound to: a node-agent outside a pod (`harnessfacts dev`, a
	// node-agent run as a host service), given an account of its own. A
	// token whose node claim names another node is refused.
	Unbound map[string]string
}

// identify asks the API server who the token belongs to, for Audience, and
// which node it speaks for. The error says why a caller is refused.
func identify(ctx context.Context, reviewer Reviewer, audience, token string, accounts Accounts) (*Identity, error) {
	tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{audience}}}
	if err := reviewer.Create(ctx, tr); err != nil {
		return nil, fmt.Errorf("the token review failed: %w", err)
	}
	st := tr.Status
	if !st.Authenticated {
		msg := "the API server did not authenticate the token for audience " + audience
		if st.Error != "" {
			msg += ": " + st.Error
		}
		return nil, &authError{msg: msg}
	}
	// An API server that ignores audiences answers without them; one that
	// honours them lists those the token is valid for.
	if !slices.Contains(st.Audiences, audience) {
		return nil, &authError{msg: fmt.Sprintf("the token is not valid for audience %s (it is for %v)", audience, st.Audiences)}
	}
	user := st.User.Username
	var claim string
	if v := st.User.Extra[NodeNameExtra]; len(v) == 1 {
		claim = v[0]
	} else if len(v) > 1 {
		return nil, &authError{msg: fmt.Sprintf("the token of %s claims %d nodes", user, len(v))}
	}
	if node, ok := accounts.Unbound[user]; ok {
		if claim != "" && claim != node {
			return nil, &refusal{msg: fmt.Sprintf("%s speaks for node %s, but its token is bound to node %s", user, node, claim)}
		}
		return &Identity{User: user, Node: node}, nil
	}
	if !slices.Contains(accounts.Bound, user) {
		return nil, &refusal{msg: user + " is not a node-agent account"}
	}
	if claim == "" {
		return nil, &refusal{msg: "the token of " + user + " carries no node claim: it must be bound to the node-agent's Pod (a projected service account token) or to a Node"}
	}
	return &Identity{User: user, Node: claim}, nil
}

// authError is a caller the API server does not vouch for (HTTP 401).
type authError struct{ msg string }

func (e *authError) Error() string { return e.msg }

// refusal is a known caller asking for what it may not have (HTTP 403).
type refusal struct{ msg string }

func (e *refusal) Error() string { return e.msg }
