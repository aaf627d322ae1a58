package httpapi

import (
	"encoding/json"
	"fmt"

	"github.com/labstack/echo/v4"
)

// jsonSerializer writes JSON without HTML escaping, so that messages such as
// `expected: > 0 && < 1` read the same in curl as in the documentation.
type jsonSerializer struct{}

func (jsonSerializer) Serialize(c echo.Context, v any, indent string) error {
	enc := json.NewEncoder(c.Response())
	enc.SetEscapeHTML(false)
	enc.SetIndent("", indent)
	return enc.Encode(v)
}

func (jsonSerializer) Deserialize(c echo.Context, v any) error {
	if err := json.NewDecoder(c.Request().Body).Decode(v); err != nil {
		return fmt.Errorf("decoding JSON body: %w", err)
	}
	return nil
}
