package main

import (
	"github.com/leveeproxy/levee/internal/admin"
	"github.com/leveeproxy/levee/internal/apps"
	"github.com/leveeproxy/levee/internal/server"
	"github.com/leveeproxy/levee/internal/topk"
)

// liveAPI is the admin API's view of the running server, with what only
// the process knows: its build and config file.
type liveAPI struct {
	srv    *server.Server
	config string // the config file's path ("" for the demo)
}

var _ admin.API = liveAPI{}

func (a liveAPI) Apps(limit int) ([]apps.AppSummary, int) { return a.srv.Table().Apps(limit) }

func (a liveAPI) App(name string) (apps.AppDetail, bool) { return a.srv.Table().App(name) }

func (a liveAPI) Top(app, by, window string) (topk.Report, bool, error) {
	return a.srv.Table().Top(app, by, window)
}

func (a liveAPI) Instance() admin.Instance {
	return admin.Instance{Instance: a.srv.Instance(), Build: buildInfo(), ConfigFile: a.config}
}
