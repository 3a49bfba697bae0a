package config

import (
	"errors"
	"reflect"
)

// Reloadable reports whether cfg may replace old by a reload. Settings
// bound to what the process opened or started with (the listeners' and
// the admin's sockets, server settings, log.format, the instance lock,
// the cluster, the catalog, tls.acme) take a restart: the error names
// the one that changed, and the caller changes nothing.
func Reloadable(old, cfg *Config) error {
	switch {
	case !reflect.DeepEqual(old.Listen, cfg.Listen):
		return errors.New("reload: listen changed; restart levee to apply it (nothing was changed)")
	case old.Admin != cfg.Admin:
		return errors.New("reload: admin changed; restart levee to apply it (nothing was changed)")
	case !reflect.DeepEqual(old.Server, cfg.Server):
		return errors.New("reload: server settings changed; restart levee to apply them (nothing was changed)")
	case old.Log.Format != cfg.Log.Format:
		return errors.New("reload: log.format changed; restart levee to apply it (nothing was changed)")
	case old.Instance.Lock != cfg.Instance.Lock || old.Instance.Unexpected != cfg.Instance.Unexpected:
		return errors.New("reload: instance.lock or instance.unexpected changed; restart levee to apply them (nothing was changed)")
	case !reflect.DeepEqual(old.Cluster, cfg.Cluster):
		return errors.New("reload: cluster settings changed; restart levee to apply them (nothing was changed)")
	case old.Catalog != cfg.Catalog:
		return errors.New("reload: catalog changed; restart levee to apply it (nothing was changed)")
	case !old.TLS.ACME.Same(&cfg.TLS.ACME):
		return errors.New("reload: tls.acme changed; restart levee to apply it (nothing was changed)")
	}
	return nil
}
