// Command reference is the HTTP ceiling the data plane is measured against: a minimal echo/v4
// server with the data plane's routes that reads the same JSON bodies ({"value": "..."} and
// {"values": [...]}, or a filter's options on PUT) with encoding/json and answers false, an array
// of false, or 201 and a small filter JSON, without touching any filter. It does what any JSON
// service on echo has to do, so the data plane's throughput divided by its throughput is the
// share that HTTP and JSON leave to the bloom filter, persistence and metrics.
//
//	go run ./bench/reference -p 8081
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/labstack/echo/v4"
)

type single struct {
	Value *string `json:"value"`
}

type multi struct {
	Values []string `json:"values"`
}

type create struct {
	ExpectedInsertions     uint64  `json:"expectedInsertions"`
	FPP                    float64 `json:"fpp"`
	ValidPeriodAfterCreate uint64  `json:"validPeriodAfterCreate"`
}

func main() {
	port := flag.Int("p", 8081, "port to listen on")
	flag.Parse()

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	const limit = 10 << 20
	read := func(c echo.Context, v any) error {
		raw, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, limit))
		if err != nil {
			return echo.NewHTTPError(http.StatusRequestEntityTooLarge, err.Error())
		}
		if err := json.Unmarshal(raw, v); err != nil {
			return echo.NewHTTPError(http.StatusBadRequest, err.Error())
		}
		return nil
	}
	one := func(c echo.Context) error {
		var b single
		if err := read(c, &b); err != nil {
			return err
		}
		if b.Value == nil {
			return echo.NewHTTPError(http.StatusBadRequest, `required parameter: "value"`)
		}
		return c.JSON(http.StatusOK, false)
	}
	many := func(c echo.Context) error {
		var b multi
		if err := read(c, &b); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, make([]bool, len(b.Values)))
	}
	g := e.Group("/v1")
	g.GET("/ping", func(c echo.Context) error { return c.String(http.StatusOK, "pong") })
	g.PUT("/bloomfilter/:name", func(c echo.Context) error {
		var b create
		if err := read(c, &b); err != nil {
			return err
		}
		return c.JSON(http.StatusCreated, map[string]any{
			"name": c.Param("name"), "expectedInsertions": b.ExpectedInsertions, "fpp": b.FPP,
		})
	})
	g.GET("/bloomfilter/:name", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]any{"name": c.Param("name")})
	})
	g.POST("/bloomfilter/:name/check", one)
	g.POST("/bloomfilter/:name/check-and-set", one)
	g.POST("/bloomfilter/:name/multi-check", many)
	g.POST("/bloomfilter/:name/multi-check-and-set", many)

	if err := e.Start(fmt.Sprintf("127.0.0.1:%d", *port)); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "reference:", err)
		os.Exit(1)
	}
}
