package cluster

// quiesce waits for the background takes in flight, so a test on a fake
// clock sees their answers before it moves time on.
func (c *Cluster) quiesce() { c.fetchs.Wait() }
