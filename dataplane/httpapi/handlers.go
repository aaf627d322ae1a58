package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// Create fields; validPeriod is filter-service's older name of validPeriodAfterCreate.
var createFields = []string{"expectedInsertions", "fpp", "validPeriodAfterCreate", "validPeriod",
	"validPeriodAfterAccess", "overwrite", "scalable", "growth", "tightening", "partitions", "failIfExists", "layout", "owner"}

// filterName is the name in the path, percent-decoded (echo leaves path parameters raw) and
// validated.
func filterName(c echo.Context, creating bool) (string, error) {
	name, err := url.PathUnescape(c.Param(wire.NameParam))
	if err != nil {
		return "", invalidParameter("name", fmt.Sprintf("%q is not a valid percent-encoded path segment", c.Param(wire.NameParam)))
	}
	if err := filter.ValidateName(name); err != nil {
		return "", engineError(err, creating)
	}
	return name, nil
}

func (s *Server) createFilter(c echo.Context) error {
	name, err := filterName(c, true)
	if err != nil {
		return err
	}
	level, err := s.writeLevel(c)
	if err != nil {
		return err
	}
	if handled, err := s.forwardToHome(c); handled || err != nil {
		return err
	}
	b, err := s.readBody(c, s.Config.MaxHTTPRequestLength)
	if err != nil {
		return err
	}
	opts, overwrite, err := s.createOptions(b)
	if err != nil {
		return err
	}
	failIfExists, err := b.bool("failIfExists", false)
	if err != nil {
		return err
	}
	f, created, err := s.Writes.Create(c.Request().Context(), level, name, opts, overwrite)
	if err != nil {
		return writeError(err, true)
	}
	if created {
		return c.JSON(http.StatusCreated, s.describeNew(f))
	}
	ignored := differences(b, opts, f.Options())
	if failIfExists {
		msg := fmt.Sprintf("filter %q exists", name)
		if len(ignored) > 0 {
			msg += " with other " + strings.Join(ignored, ", ")
		}
		return &apiError{http.StatusConflict, wire.CodeFilterExists, msg + "; overwrite: true replaces it, empty"}
	}
	out := s.describe(f.Info())
	out.IgnoredParameters = ignored
	return c.JSON(http.StatusOK, out)
}

// differences are the fields a create gave that differ from the existing filter's options, which
// the filter keeps: a create of an existing name answers it unchanged.
func differences(b body, asked, existing filter.Options) []string {
	var out []string
	for _, d := range []struct {
		fields []string
		differ bool
	}{
		{[]string{"expectedInsertions"}, asked.Capacity != existing.Capacity},
		{[]string{"fpp"}, asked.FPP != existing.FPP},
		{[]string{"validPeriodAfterCreate", "validPeriod"}, asked.ValidAfterCreate != existing.ValidAfterCreate},
		{[]string{"validPeriodAfterAccess"}, asked.ValidAfterAccess != existing.ValidAfterAccess},
		{[]string{"scalable"}, asked.Scalable != existing.Scalable},
		{[]string{"growth"}, asked.Growth != existing.Growth},
		{[]string{"tightening"}, asked.Tightening != existing.Tightening},
		{[]string{"partitions"}, asked.PartitionCount() != existing.PartitionCount()},
		{[]string{"layout"}, asked.Layout != existing.Layout},
		{[]string{"owner"}, asked.Owner != existing.Owner},
	} {
		for _, field := range d.fields {
			if _, given := b.field(field); given && d.differ {
				out = append(out, field)
			}
		}
	}
	return out
}

func (s *Server) createOptions(b body) (opts filter.Options, overwrite bool, err error) {
	if err = b.only(createFields...); err != nil {
		return opts, false, err
	}
	_, hasAlias := b.field("validPeriod")
	if _, hasField := b.field("validPeriodAfterCreate"); hasAlias && hasField {
		return opts, false, invalidParameter("validPeriod", `it is another name of "validPeriodAfterCreate"; give one of them`)
	}
	afterCreate := "validPeriodAfterCreate"
	if hasAlias {
		afterCreate = "validPeriod"
	}
	const maxCapacity = 1 << 53 // far beyond any memory limit; keeps the float arithmetic exact
	var growth uint64
	// Fields are checked in a fixed order, so the first error named is predictable.
	if opts.Capacity, err = b.uint("expectedInsertions", s.Config.DefaultExpectedInsertions, 1, maxCapacity); err != nil {
		return opts, false, err
	}
	if opts.FPP, err = b.openUnitInterval("fpp", s.Config.DefaultFPP); err != nil {
		return opts, false, err
	}
	if opts.ValidAfterCreate, err = b.seconds(afterCreate, s.Config.DefaultValidAfterCreate); err != nil {
		return opts, false, err
	}
	if opts.ValidAfterAccess, err = b.seconds("validPeriodAfterAccess", 0); err != nil {
		return opts, false, err
	}
	// As filter-service: 0 is no period at all, and a client that sends it meant something else.
	if _, given := b.field("validPeriodAfterAccess"); given && opts.ValidAfterAccess == 0 {
		return opts, false, invalidParameter("validPeriodAfterAccess", "must be greater than 0; leave it out for no expiry after access")
	}
	if opts.Scalable, err = b.bool("scalable", true); err != nil {
		return opts, false, err
	}
	if growth, err = b.uint("growth", filter.DefaultGrowth, 1, 16); err != nil {
		return opts, false, err
	}
	opts.Growth = uint(growth)
	if opts.Tightening, err = b.openUnitInterval("tightening", filter.DefaultTightening); err != nil {
		return opts, false, err
	}
	// Left out, 0: the write service picks the fewest that fit the per-filter limit.
	partitions, err := b.uint("partitions", 0, 1, filter.MaxPartitions)
	if err != nil {
		return opts, false, err
	}
	opts.Partitions = uint32(partitions)
	// Left out: bits-and-blooms, the layout of every filter made before there were others.
	if _, given := b.field("layout"); given {
		name, err := b.string("layout")
		if err != nil {
			return opts, false, err
		}
		if opts.Layout, err = filter.ParseLayout(name); err != nil {
			return opts, false, invalidParameter("layout", fmt.Sprintf("must be %q or %q", filter.LayoutNameBitsAndBlooms, filter.LayoutNameRedisBloom))
		}
	}
	if _, given := b.field("owner"); given {
		if opts.Owner, err = ownerOf(b); err != nil {
			return opts, false, err
		}
	}
	overwrite, err = b.bool("overwrite", false)
	return opts, overwrite, err
}

// ownerText is how the API writes an owner: a UUID, or nothing for none.
func ownerText(id filter.OwnerID) string {
	if id.IsZero() {
		return ""
	}
	return uuid.UUID(id).String()
}

// ownerOf reads the create's owner.
func ownerOf(b body) (filter.OwnerID, error) {
	text, err := b.string("owner")
	if err != nil {
		return filter.OwnerID{}, err
	}
	return parseOwner(text)
}

// parseOwner reads an owner: a UUID other than the nil one, which would name no one.
func parseOwner(text string) (filter.OwnerID, error) {
	id, err := uuid.Parse(text)
	if err != nil || id == uuid.Nil {
		return filter.OwnerID{}, invalidParameter("owner", fmt.Sprintf("must be a UUID other than the nil one, got %q", text))
	}
	return filter.OwnerID(id), nil
}

func (s *Server) getFilter(c echo.Context) error {
	f, err := s.lookup(c)
	if err != nil {
		return err
	}
	if s.Writes.Placed() {
		out, err := s.describePlaced(c, f)
		if err != nil {
			return writeError(err, false)
		}
		return c.JSON(http.StatusOK, out)
	}
	return c.JSON(http.StatusOK, s.describe(f.Info()))
}

// listFilters answers the live filters' names, sorted, as filter-service does; with
// ?details=true, their definitions (wire.ListedFilter).
func (s *Server) listFilters(c echo.Context) error {
	details := false
	if raw := c.QueryParam(wire.DetailsParam); raw != "" {
		var err error
		if details, err = strconv.ParseBool(raw); err != nil {
			return invalidParameter(wire.DetailsParam, fmt.Sprintf("must be true or false, got %q", raw))
		}
	}
	names := s.Store.Names()
	if !details {
		if names == nil {
			names = []string{}
		}
		return c.JSON(http.StatusOK, names)
	}
	listed := make([]wire.ListedFilter, 0, len(names))
	for _, name := range names {
		f, err := s.Store.Get(name)
		if err != nil {
			continue // deleted or expired since Names
		}
		d := s.describe(f.InfoOf(func(int) bool { return false }))
		listed = append(listed, wire.ListedFilter{
			Name: d.Name, ExpectedInsertions: d.ExpectedInsertions, FPP: d.FPP, Scalable: d.Scalable,
			Partitions: d.Partitions, PartitionsHeld: f.HeldPartitions(), Created: d.Created, Expiration: d.Expiration,
		})
	}
	return c.JSON(http.StatusOK, listed)
}

func (s *Server) deleteFilter(c echo.Context) error {
	name, err := filterName(c, false)
	if err != nil {
		return err
	}
	level, err := s.writeLevel(c)
	if err != nil {
		return err
	}
	if raw := c.QueryParam(wire.OwnerParam); raw != "" {
		if err := s.madeBy(name, raw); err != nil {
			return err
		}
	}
	if err := s.Writes.Delete(c.Request().Context(), level, name); err != nil {
		return writeError(err, false)
	}
	return c.NoContent(http.StatusOK)
}

// madeBy checks that the filter name was made by the owner raw names, for a delete that names it:
// another of the same name (made since) is left, and a filter this pod lacks is not deleted from
// the peers either, since their filter of that name cannot be told apart from here: a 404 says
// so, for the caller to ask another pod.
func (s *Server) madeBy(name, raw string) error {
	owner, err := parseOwner(raw)
	if err != nil {
		return err
	}
	f, err := s.Store.Get(name)
	if err != nil {
		return engineError(err, false)
	}
	if has := f.Options().Owner; has != owner {
		made := "without an owner"
		if !has.IsZero() {
			made = "by owner " + ownerText(has)
		}
		return &apiError{http.StatusConflict, wire.CodeOtherOwner, fmt.Sprintf("filter %q was made %s, not by %s; it is left", name, made, ownerText(owner))}
	}
	return nil
}

// lookup finds the filter named in the path, after the body has been validated.
func (s *Server) lookup(c echo.Context) (*filter.Filter, error) {
	name, err := filterName(c, false)
	if err != nil {
		return nil, err
	}
	f, err := s.Store.Get(name)
	if errors.Is(err, filter.ErrNotFound) && forwarded(c) && s.Writes.Placed() {
		// A peer routed values here: the filter's create may not have reached this pod yet, and
		// another owner may serve them.
		return nil, &apiError{http.StatusServiceUnavailable, wire.CodeUnavailable, fmt.Sprintf("filter %q has not reached this pod", name)}
	}
	if err != nil {
		return nil, engineError(err, false)
	}
	return f, nil
}

// readValue reads {"value": "..."} and the filter it is meant for.
func (s *Server) readValue(c echo.Context) (*filter.Filter, string, error) {
	value, err := s.singleValue(c)
	if err != nil {
		return nil, "", err
	}
	f, err := s.lookup(c)
	return f, value, err
}

// decodeHot reads the body of a hot endpoint: fast decodes the plain well-formed case in place
// (fastjson.go) and answers ok; anything else comes back as a body for the strict getters, whose
// messages are the contract.
func decodeHot[T any](s *Server, c echo.Context, limit int64, fast func([]byte) (T, bool)) (v T, b body, ok bool, err error) {
	raw, pooled, declared, err := s.readRaw(c, limit)
	if err != nil {
		return v, nil, false, err
	}
	if !declared {
		b, err = s.readBody(c, limit)
		return v, b, false, err
	}
	defer releaseRaw(pooled, raw) // fast and decodeBody copy what they keep
	if v, ok = fast(raw); ok {
		return v, nil, true, nil
	}
	b, err = decodeBody(raw)
	return v, b, false, err
}

// singleValue decodes {"value": "..."}.
func (s *Server) singleValue(c echo.Context) (string, error) {
	value, b, ok, err := decodeHot(s, c, s.Config.MaxHTTPRequestLength, fastValue)
	if ok || err != nil {
		return value, err
	}
	if err := b.only("value"); err != nil {
		return "", err
	}
	if _, given := b.field("value"); !given {
		return "", requiredField(c, "value")
	}
	return b.string("value")
}

// readValues reads {"values": [...]} and the filter it is meant for.
func (s *Server) readValues(c echo.Context) (*filter.Filter, []string, error) {
	values, b, ok, err := decodeHot(s, c, s.Config.MaxHTTPRequestLength, fastValues)
	switch {
	case err != nil:
		return nil, nil, err
	case !ok:
		if values, err = slowValues(c, b); err != nil {
			return nil, nil, err
		}
	}
	if err := s.chargeValues(c, len(values)); err != nil {
		return nil, nil, err
	}
	f, err := s.lookup(c)
	return f, values, err
}

// slowValues reads the values of a body that fastValues did not: "values", or from a peer
// wire.Base64ValuesField (wire.PeerValuesBody).
func slowValues(c echo.Context, b body) ([]string, error) {
	if _, given := b.field(wire.Base64ValuesField); given && forwarded(c) {
		if err := b.only(wire.Base64ValuesField); err != nil {
			return nil, err
		}
		var raw [][]byte
		if err := json.Unmarshal(b[wire.Base64ValuesField], &raw); err != nil {
			return nil, invalidParameter(wire.Base64ValuesField, err.Error())
		}
		values := make([]string, len(raw))
		for i, v := range raw {
			values[i] = string(v)
		}
		return values, nil
	}
	if err := b.only("values"); err != nil {
		return nil, err
	}
	if _, given := b.field("values"); !given {
		return nil, requiredField(c, "values")
	}
	return b.strings("values")
}

func (s *Server) check(c echo.Context) error {
	level, err := consistency(c, wire.ConsistencyOne)
	if err != nil {
		return err
	}
	f, value, err := s.readValue(c)
	if err != nil {
		return err
	}
	if s.Writes.Placed() {
		answers, err := s.Writes.Routed(c.Request().Context(), level, f, wire.OpMultiCheck, []string{value}, forwarded(c))
		if err != nil {
			return writeError(err, false)
		}
		return writeBool(c, answers[0])
	}
	present := f.Check(value)
	if !present && s.Writes.AsksPeers(level) {
		answers := []bool{false}
		if err := s.checkPeers(c, level, f.Name(), []string{value}, answers); err != nil {
			return err
		}
		present = answers[0]
	}
	return writeBool(c, present)
}

func (s *Server) multiCheck(c echo.Context) error {
	level, err := consistency(c, wire.ConsistencyOne)
	if err != nil {
		return err
	}
	f, values, err := s.readValues(c)
	if err != nil {
		return err
	}
	if s.Writes.Placed() {
		answers, err := s.Writes.Routed(c.Request().Context(), level, f, wire.OpMultiCheck, values, forwarded(c))
		if err != nil {
			return writeError(err, false)
		}
		return writeBools(c, answers)
	}
	present := f.CheckMany(values)
	if err := s.checkPeers(c, level, f.Name(), values, present); err != nil {
		return err
	}
	return writeBools(c, present)
}

// The writes below go through the write service, which applies, journals and replicates them;
// check-and-sets are served by the filter's home pod.

// forwardCheckAndSet sends a check-and-set to the filter's home, unless the membership is placed:
// the write service then routes each value to its partition's home.
func (s *Server) forwardCheckAndSet(c echo.Context) (bool, error) {
	if s.Writes.Placed() {
		return false, nil
	}
	return s.forwardToHome(c)
}

func (s *Server) checkAndSet(c echo.Context) error {
	level, err := s.writeLevel(c)
	if err != nil {
		return err
	}
	if handled, err := s.forwardCheckAndSet(c); handled || err != nil {
		return err
	}
	f, value, err := s.readValue(c)
	if err != nil {
		return err
	}
	if s.Writes.Placed() {
		answers, err := s.Writes.Routed(c.Request().Context(), level, f, wire.OpMultiCheckAndSet, []string{value}, forwarded(c))
		if err != nil {
			return writeError(err, false)
		}
		return writeBool(c, answers[0])
	}
	present, err := s.Writes.CheckAndSet(c.Request().Context(), level, f, value)
	if err != nil {
		return writeError(err, false)
	}
	return writeBool(c, present)
}

func (s *Server) multiCheckAndSet(c echo.Context) error {
	level, err := s.writeLevel(c)
	if err != nil {
		return err
	}
	if handled, err := s.forwardCheckAndSet(c); handled || err != nil {
		return err
	}
	f, values, err := s.readValues(c)
	if err != nil {
		return err
	}
	if s.Writes.Placed() {
		answers, err := s.Writes.Routed(c.Request().Context(), level, f, wire.OpMultiCheckAndSet, values, forwarded(c))
		if err != nil {
			return writeError(err, false)
		}
		return writeBools(c, answers)
	}
	present, err := s.Writes.CheckAndSetMany(c.Request().Context(), level, f, values)
	if err != nil {
		return writeError(err, false)
	}
	return writeBools(c, present)
}

func (s *Server) set(c echo.Context) error {
	level, err := s.writeLevel(c)
	if err != nil {
		return err
	}
	f, value, err := s.readValue(c)
	if err != nil {
		return err
	}
	if s.Writes.Placed() {
		if _, err := s.Writes.Routed(c.Request().Context(), level, f, wire.OpMultiSet, []string{value}, forwarded(c)); err != nil {
			return writeError(err, false)
		}
		return c.NoContent(http.StatusOK)
	}
	if err := s.Writes.Set(c.Request().Context(), level, f, value); err != nil {
		return writeError(err, false)
	}
	return c.NoContent(http.StatusOK)
}

func (s *Server) multiSet(c echo.Context) error {
	level, err := s.writeLevel(c)
	if err != nil {
		return err
	}
	f, values, err := s.readValues(c)
	if err != nil {
		return err
	}
	if s.Writes.Placed() {
		if _, err := s.Writes.Routed(c.Request().Context(), level, f, wire.OpMultiSet, values, forwarded(c)); err != nil {
			return writeError(err, false)
		}
		return c.NoContent(http.StatusOK)
	}
	if err := s.Writes.SetMany(c.Request().Context(), level, f, values); err != nil {
		return writeError(err, false)
	}
	return c.NoContent(http.StatusOK)
}

// lastDeadline is the last expiry a filter can hold: the engine, its log and its peers count time
// in int64 nanoseconds.
var lastDeadline = time.Unix(0, math.MaxInt64)

// setExpiration sets the filter's expiry to the deadline of {"expiration": "<RFC 3339>"}, in place
// of whatever its options said, and answers the filter. It is a write like the others, replicated
// and journaled, served by this pod (see filter.Expiry for how concurrent changes converge).
func (s *Server) setExpiration(c echo.Context) error {
	level, err := s.writeLevel(c)
	if err != nil {
		return err
	}
	b, err := s.readBody(c, s.Config.MaxHTTPRequestLength)
	if err != nil {
		return err
	}
	if err := b.only("expiration"); err != nil {
		return err
	}
	text, err := b.string("expiration")
	if err != nil {
		return err
	}
	at, err := time.Parse(time.RFC3339Nano, text)
	switch {
	case err != nil:
		return invalidParameter("expiration", fmt.Sprintf("%q is not an RFC 3339 time such as 2030-01-02T15:04:05Z", text))
	case !at.After(s.Store.Now()):
		return invalidParameter("expiration", fmt.Sprintf("%s is not in the future; DELETE the filter to remove it now", text))
	case at.After(lastDeadline):
		return invalidParameter("expiration", fmt.Sprintf("%s is after %s, the last time a filter can expire at", text, lastDeadline.UTC().Format(wire.TimeFormat)))
	}
	return s.changeExpiry(c, level, func(time.Time) (filter.Expiry, bool) {
		return filter.Expiry{Mode: filter.ExpiryAt, At: at}, true
	})
}

// removeExpiration makes the filter never expire, and answers it.
func (s *Server) removeExpiration(c echo.Context) error {
	level, err := s.writeLevel(c)
	if err != nil {
		return err
	}
	return s.changeExpiry(c, level, func(current time.Time) (filter.Expiry, bool) {
		return filter.Expiry{Mode: filter.ExpiryNever}, !current.IsZero()
	})
}

func (s *Server) changeExpiry(c echo.Context, level wire.Consistency, change filter.ExpiryChange) error {
	f, err := s.lookup(c)
	if err != nil {
		return err
	}
	if _, err := s.Writes.ChangeExpiry(c.Request().Context(), level, f, change); err != nil {
		return writeError(err, false)
	}
	return c.JSON(http.StatusOK, s.describe(f.Info()))
}

func (s *Server) ping(c echo.Context) error {
	return c.String(http.StatusOK, "pong")
}

// describe writes a filter's info in the API's JSON shape.
func (s *Server) describe(info filter.Info) wire.Filter {
	o := info.Options
	out := wire.Filter{
		Name:               info.Name,
		ExpectedInsertions: o.Capacity,
		FPP:                o.FPP,
		Created:            info.Created.UTC().Format(wire.TimeFormat),
		Partitions:         o.PartitionCount(),
		Scalable:           o.Scalable,
		Items:              info.Items,
		Bits:               info.Bits,
		Hashes:             info.Hashes,
		Layers:             info.Layers,
		SizeBytes:          info.SizeBytes,
		FillRatio:          probability(info.FillRatio),
		EstimatedFPP:       probability(info.EstimatedFPP),
	}
	if !info.Expiry.IsZero() {
		out.Expiration = info.Expiry.UTC().Format(wire.TimeFormat)
	}
	if o.ValidAfterAccess > 0 {
		out.ValidPeriodAfterAccess = int64(o.ValidAfterAccess / time.Second)
	}
	if o.Scalable {
		out.Growth, out.Tightening = o.Growth, o.Tightening
	}
	out.Layout = o.Layout.String()
	out.Owner = ownerText(o.Owner)
	if s.LastSnapshot != nil {
		if at := s.LastSnapshot(); !at.IsZero() {
			out.LastSnapshot = at.UTC().Format(wire.TimeFormat)
		}
	}
	return out
}

// probability clamps a ratio to [0, 1], NaN to 1: encoding/json refuses NaN and infinities, and
// one would fail every describe of the filter for good, while 1 is the estimate that promises
// least.
func probability(x float64) float64 {
	switch {
	case x >= 0 && x <= 1:
		return x
	case x < 0:
		return 0
	}
	return 1
}
