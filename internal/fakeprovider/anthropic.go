package fakeprovider

import (
	"errors"
	"net/http"
)

// anthropicDialect serves Anthropic Messages (Claude Code).
var anthropicDialect = dialect{name: "anthropic", serve: func(x *exchange) {
	x.fail(http.StatusNotImplemented, errors.New("the anthropic dialect is not built yet"))
}}
