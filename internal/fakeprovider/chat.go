package fakeprovider

import (
	"errors"
	"net/http"
)

// chatDialect serves OpenAI Chat Completions (OpenCode, Aider).
var chatDialect = dialect{name: "chat", serve: func(x *exchange) {
	x.fail(http.StatusNotImplemented, errors.New("the chat dialect is not built yet"))
}}
