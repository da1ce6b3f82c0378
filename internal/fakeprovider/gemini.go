package fakeprovider

import (
	"errors"
	"net/http"
)

// geminiDialect serves Gemini streamGenerateContent (Gemini CLI).
var geminiDialect = dialect{name: "gemini", serve: func(x *exchange) {
	x.fail(http.StatusNotImplemented, errors.New("the gemini dialect is not built yet"))
}}
