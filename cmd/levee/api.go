package main

import (
	"github.com/leveeproxy/levee/internal/admin"
	"github.com/leveeproxy/levee/internal/server"
)

// liveAPI is the admin API's view of the running server, with what only
// the process knows: its build and config file.
type liveAPI struct {
	srv    *server.Server
	config string // the config file's path ("" for the demo)
}

var _ admin.API = liveAPI{}

func (a liveAPI) Apps(limit int) (any, int) { return a.srv.Apps(limit) }

func (a liveAPI) App(name string) (any, bool) { return a.srv.App(name) }

func (a liveAPI) Top(app, by, window string) (any, bool, error) { return a.srv.Top(app, by, window) }

// instanceView is GET /api/instance.
type instanceView struct {
	server.Instance
	Build      build  `json:"build"`
	ConfigFile string `json:"config_file,omitempty"`
}

func (a liveAPI) Instance() any {
	return instanceView{Instance: a.srv.Instance(), Build: buildInfo(), ConfigFile: a.config}
}
