package h2

import (
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2/hpack"
)

// onHeaders starts a header block.
func (c *conn) onHeaders(fh frameHeader, p []byte) error {
	p, selfDep, f, ok := headersPayload(fh, p)
	if !ok {
		return connError{f.code, f.reason}
	}
	c.hb = headerBlock{active: true, stream: fh.stream, endStream: fh.flags&flagEndStream != 0, selfDep: selfDep,
		fields: c.hb.fields[:0], remain: c.maxHList}
	return c.headerFragment(p, fh.flags&flagEndHeaders != 0)
}

// headerFragment decodes one fragment of the block; the last one ends it.
func (c *conn) headerFragment(p []byte, end bool) error {
	c.hb.bytes += len(p)
	if c.hb.bytes > 2*int(c.maxHList)+16<<10 {
		// h2guard closes such a connection first; this bounds the work
		// without it.
		return connError{ErrCodeEnhanceYourCalm, "header block too large"}
	}
	if _, err := c.hdec.Write(p); err != nil {
		return connError{ErrCodeCompression, "header block"}
	}
	if !end {
		return nil
	}
	c.hb.active = false
	if err := c.hdec.Close(); err != nil {
		return connError{ErrCodeCompression, "header block"}
	}
	c.hdec.SetEmitEnabled(true)
	err := c.endHeaders()
	clear(c.hb.fields) // no strings kept past the request
	return err
}

// emit receives each decoded field.
func (c *conn) emit(f hpack.HeaderField) {
	hb := &c.hb
	if hb.invalid || hb.truncated {
		return
	}
	if !httpguts.ValidHeaderFieldValue(f.Value) {
		hb.invalid = true
	} else if strings.HasPrefix(f.Name, ":") {
		hb.invalid = hb.sawRegular
	} else {
		hb.sawRegular = true
		hb.invalid = !validWireName(f.Name)
	}
	if hb.invalid {
		c.hdec.SetEmitEnabled(false)
		return
	}
	if size := f.Size(); size > hb.remain {
		hb.truncated = true
		c.hdec.SetEmitEnabled(false)
		return
	} else {
		hb.remain -= size
	}
	hb.fields = append(hb.fields, f)
}

// validWireName reports whether a regular field name is a token with no
// uppercase letter (RFC 9113 §8.2.1).
func validWireName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !httpguts.IsTokenRune(rune(b)) || 'A' <= b && b <= 'Z' {
			return false
		}
	}
	return true
}

// endHeaders acts on a complete header block: a new request, or a
// request's trailers.
func (c *conn) endHeaders() error {
	hb := &c.hb
	id := hb.stream
	c.mu.Lock()
	if st := c.streams[id]; st != nil {
		c.mu.Unlock()
		return c.trailers(id)
	}
	if id%2 == 0 {
		c.mu.Unlock()
		return connError{ErrCodeProtocol, "even stream id"}
	}
	if id <= c.maxClientID {
		c.mu.Unlock()
		return connError{ErrCodeProtocol, "stream id went down"}
	}
	c.maxClientID = id
	if c.goingAway {
		c.mu.Unlock()
		return nil // past the GOAWAY's last stream: never taken
	}
	if hb.selfDep || hb.invalid {
		c.mu.Unlock()
		return c.writeRST(id, ErrCodeProtocol)
	}
	if uint32(len(c.streams)) >= c.maxStrms {
		code := ErrCodeProtocol
		if c.unacked > 0 {
			code = ErrCodeRefusedStream
		}
		c.mu.Unlock()
		return c.writeRST(id, code)
	}
	c.mu.Unlock()

	st := newStream(c, id)
	handler, ok := c.request(st)
	if !ok {
		st.free()
		return c.writeRST(id, ErrCodeProtocol)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		st.abandon()
		return nil
	}
	st.sendWindow = c.peerWindow
	st.inMap = true
	st.remoteEnded = hb.endStream
	c.streams[id] = st
	if c.base != nil && c.base.Err() != nil {
		// Under c.mu: cancelRunning, once base has ended, sees st among
		// c.streams, or has run already.
		st.sc.ctx.cancel()
	}
	if c.handlers >= int(c.maxStrms) {
		if len(c.pending) >= maxPending*int(c.maxStrms) {
			c.mu.Unlock()
			return connError{ErrCodeEnhanceYourCalm, "too many handlers"}
		}
		st.handler = handler
		c.pending = append(c.pending, st)
		c.mu.Unlock()
		return nil
	}
	c.handlers++
	c.hwg.Add(1)
	c.linkRunningLocked(st)
	c.mu.Unlock()
	c.spawn(st, handler)
	return nil
}

// trailers takes the trailers (§8.1) of the request on stream id. The
// stream is looked up again under each hold of c.mu: its handler may end,
// and free it, whenever the lock is let go.
func (c *conn) trailers(id uint32) error {
	hb := &c.hb
	c.mu.Lock()
	st := c.streams[id]
	if st == nil || st.remoteEnded {
		c.mu.Unlock()
		return c.streamError(id, ErrCodeStreamClosed)
	}
	c.mu.Unlock()
	if !hb.endStream || hb.invalid {
		return c.streamError(id, ErrCodeProtocol)
	}
	var tr http.Header
	for _, f := range hb.fields {
		if strings.HasPrefix(f.Name, ":") {
			return c.streamError(id, ErrCodeProtocol)
		}
		k := c.canonical(f.Name)
		if !httpguts.ValidTrailerHeader(k) {
			return c.streamError(id, ErrCodeProtocol)
		}
		if tr == nil {
			tr = http.Header{}
		}
		tr[k] = append(tr[k], f.Value)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if st = c.streams[id]; st == nil {
		return nil // ended meanwhile: nothing reads its trailers
	}
	if b := st.body; b != nil {
		b.trailer = tr
	}
	c.endRemoteLocked(st)
	return nil
}

// canonical returns the net/http form of a lowercase wire name.
func (c *conn) canonical(name string) string {
	if k, ok := commonCanonical[name]; ok {
		return k
	}
	if k, ok := c.canon[name]; ok {
		return k
	}
	k := textproto.CanonicalMIMEHeaderKey(name)
	if c.canon == nil {
		c.canon = map[string]string{}
	}
	if len(c.canon) < 128 {
		c.canon[name] = k
	}
	return k
}

var commonCanonical = map[string]string{}

func init() {
	for k, w := range staticNames {
		commonCanonical[w.lower] = k
	}
	for _, k := range []string{"Origin", "Priority", "Pragma", "Upgrade-Insecure-Requests", "Sec-Fetch-Dest",
		"Sec-Fetch-Mode", "Sec-Fetch-Site", "Sec-Fetch-User", "Sec-Ch-Ua", "Sec-Ch-Ua-Mobile", "Sec-Ch-Ua-Platform",
		"Dnt", "X-Requested-With", "X-Real-Ip", "Content-Md5", "X-Http-Method-Override", "X-Api-Key",
		"Grpc-Timeout", "Grpc-Encoding", "Grpc-Accept-Encoding", "X-Csrf-Token"} {
		commonCanonical[strings.ToLower(k)] = k
	}
}

// request builds st's request from the header block just read, and the
// handler to run: the server's, or one that answers 431. It reports
// false for a malformed request (a stream error PROTOCOL_ERROR).
func (c *conn) request(st *stream) (http.Handler, bool) {
	hb := &c.hb
	var method, scheme, authority, path, protocol string
	var seen uint8
	nreg := 0
	for i := range hb.fields {
		f := &hb.fields[i]
		if !strings.HasPrefix(f.Name, ":") {
			nreg = len(hb.fields) - i
			break
		}
		var bit uint8
		var dst *string
		switch f.Name {
		case ":method":
			bit, dst = 1, &method
		case ":scheme":
			bit, dst = 2, &scheme
		case ":authority":
			bit, dst = 4, &authority
		case ":path":
			bit, dst = 8, &path
		case ":protocol":
			bit, dst = 16, &protocol
		default:
			return nil, false // unknown, or a response's (:status)
		}
		if seen&bit != 0 {
			return nil, false
		}
		seen |= bit
		*dst = f.Value
	}
	if protocol != "" {
		return nil, false // extended CONNECT is not offered
	}
	if method == "CONNECT" {
		if path != "" || scheme != "" || authority == "" {
			return nil, false
		}
	} else if method == "" || path == "" || scheme != "http" && scheme != "https" {
		return nil, false
	}
	regular := hb.fields[len(hb.fields)-nreg:]

	// The stream's map and values, reused: each field's slice has a
	// capacity of one, so an append to it copies instead of overwriting
	// the next.
	vals := slices.Grow(st.vals[:0], len(regular))[:len(regular)]
	st.vals = vals
	header := st.reqHdr
	if header == nil {
		header = make(http.Header, len(regular))
		st.reqHdr = header
	}
	var cookies int
	for i := range regular {
		f := &regular[i]
		switch f.Name {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			return nil, false
		case "te":
			if f.Value != "trailers" {
				return nil, false
			}
		case "cookie":
			cookies++
		}
		k := c.canonical(f.Name)
		vals[i] = f.Value
		if vv, ok := header[k]; ok {
			header[k] = append(vv, f.Value)
		} else {
			header[k] = vals[i : i+1 : i+1]
		}
	}
	if cookies > 1 {
		header["Cookie"] = []string{strings.Join(header["Cookie"], "; ")}
	}
	if authority == "" {
		if host := header["Host"]; len(host) > 0 {
			authority = host[0]
		}
	}
	// The Host field is left for the handler to judge against
	// :authority, as net/http leaves it; userinfo is malformed (§8.3.1).
	if strings.IndexByte(authority, '@') >= 0 && scheme != "" {
		return nil, false
	}
	needsContinue := false
	if ex, ok := header["Expect"]; ok && httpguts.HeaderValuesContainsToken(ex, "100-continue") {
		needsContinue = true
		delete(header, "Expect")
	}
	var trailer http.Header
	for _, v := range header["Trailer"] {
		for _, key := range strings.Split(v, ",") {
			key = textproto.CanonicalMIMEHeaderKey(textproto.TrimString(key))
			switch key {
			case "Transfer-Encoding", "Trailer", "Content-Length", "":
			default:
				if trailer == nil {
					trailer = http.Header{}
				}
				trailer[key] = nil
			}
		}
	}
	delete(header, "Trailer")

	u := &st.url
	var requestURI string
	if method == "CONNECT" {
		*u, requestURI = url.URL{Host: authority}, authority
	} else if !parseOrigin(u, path) {
		p, err := url.ParseRequestURI(path)
		if err != nil {
			return nil, false
		}
		*u, requestURI = *p, path
	} else {
		requestURI = path
	}

	cl := int64(0)
	st.declLen = -1
	if !hb.endStream {
		cl = -1
		if vv, ok := header["Content-Length"]; ok {
			// As net/http: the first value, 0 if it is no number; the
			// handler judges the field (levee refuses such a request).
			cl = 0
			if n, err := strconv.ParseUint(vv[0], 10, 63); err == nil {
				cl = int64(n)
			}
			st.declLen = cl
		}
	}
	sc := &scope{ctx: reqContext{parent: c.ctx}}
	sc.w.st = st
	st.sc = sc
	st.rq = http.Request{
		Method:        method,
		URL:           u,
		Proto:         "HTTP/2.0",
		ProtoMajor:    2,
		Header:        header,
		ContentLength: cl,
		Host:          authority,
		RemoteAddr:    c.remote,
		RequestURI:    requestURI,
		Trailer:       trailer,
		Body:          http.NoBody,
	}
	if scheme == "https" {
		st.rq.TLS = c.tls
	}
	if !hb.endStream {
		b := &sc.body
		*b = requestBody{c: c, st: st, needsContinue: needsContinue, reqTrailer: trailer, buf: st.bodyBuf}
		st.bodyBuf = nil
		st.body = b
		st.rq.Body = b
		if d := c.srv.ReadTimeout; d > 0 {
			b.deadline = timeNow().Add(d)
		}
	}
	// The handler's own copy, with the context (the copy is the only way
	// to set it): rq stays the stream's. WithContext inlines, so its copy
	// is not allocated: it lands in the scope.
	sc.req = *st.rq.WithContext(&sc.ctx)
	st.req = &sc.req
	st.isHead = method == "HEAD"
	if d := c.srv.WriteTimeout; d > 0 {
		st.writeDeadline = timeNow().Add(d)
	}
	if hb.truncated {
		return http.HandlerFunc(headerListTooLong), true
	}
	if method == "OPTIONS" && path == "*" {
		return http.HandlerFunc(optionsStar), true // as net/http answers it
	}
	return c.handler, true
}

func headerListTooLong(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusRequestHeaderFieldsTooLarge)
	w.Write([]byte("<h1>HTTP Error 431</h1><p>Request Header Field(s) Too Large</p>"))
}

// optionsStar answers OPTIONS * as net/http does, without the handler.
func optionsStar(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Length", "0")
	if r.ContentLength != 0 {
		io.Copy(io.Discard, io.LimitReader(r.Body, 256<<10))
	}
}

// parseOrigin parses an origin-form :path into u as url.ParseRequestURI
// would, when that is plain: a path of characters that need no escape,
// then perhaps a query. It reports false, leaving u as it was, for any
// other (then url.ParseRequestURI parses it, allocating its URL).
func parseOrigin(u *url.URL, s string) bool {
	if len(s) == 0 || s[0] != '/' {
		return false
	}
	path, query, hasQuery := s, "", false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '?' {
			path, query, hasQuery = s[:i], s[i+1:], true
			break
		}
		if !pathChar(c) {
			return false
		}
	}
	for i := 0; i < len(query); i++ {
		if c := query[i]; c < ' ' || c == 0x7f {
			return false // ParseRequestURI refuses control characters
		}
	}
	*u = url.URL{Path: path}
	if hasQuery {
		if query == "" {
			u.ForceQuery = true
		} else {
			u.RawQuery = query
		}
	}
	return true
}

// pathChar reports whether c stands for itself in a URL path: net/url
// neither unescapes nor escapes it there (shouldEscape, encodePath).
func pathChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '_', '.', '~', '$', '&', '+', ',', '/', ':', ';', '=', '@':
		return true
	}
	return false
}
