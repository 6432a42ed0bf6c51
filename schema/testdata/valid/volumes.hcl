# Volumes: data that belongs to a slot, not to a node.
service "cache" {
  command   = ["/bin/sh", "-c", "exec redis-server --port 6379 --dir \"$MARIPOSA_VOLUME_DATA\" --appendonly yes"]
  port      = 6379
  count     = 1
  exclusive = true

  volume "data" {
    path            = "redis-data"
    handoff         = "snapshot"
    snapshot        = ["/srv/cache/bin/dump", "--to", "dump.rdb"]
    restore         = ["/srv/cache/bin/load", "dump.rdb"]
    replicas        = 2
    interval        = "1m"
    restore_timeout = "30m"
    on_missing      = "fail"
  }

  volume "scratch-space" {}

  reschedule {
    node_lost_after = "60s"
  }
}

# A group's volumes belong to its slots: every member sees them.
group "wiki" {
  count = 2

  volume "pages" {
    handoff = "sticky"
  }

  service "wiki" {
    command = ["/srv/wiki"] # reads MARIPOSA_VOLUME_PAGES
  }

  service "wiki-indexer" {
    command = ["/srv/wiki", "index"]
  }
}
