package fakeprovider

import (
	"errors"
	"net/http"
)

// responsesDialect serves OpenAI Responses (Codex).
var responsesDialect = dialect{name: "responses", serve: func(x *exchange) {
	x.fail(http.StatusNotImplemented, errors.New("the responses dialect is not built yet"))
}}
