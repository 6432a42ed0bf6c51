# Cluster units: services and a group with a count, which the nodes started
# with "mariposa run -cluster" share out in slots.
service "search" {
  command = ["/srv/search/bin/search"]
  version = "2.3.0"
  count   = 3

  constraint {
    attribute = "node.meta.zone"
    operator  = "!="
    value     = "z3"
  }

  constraint {
    attribute = "mariposa.version"
    operator  = "version"
    value     = ">= 0.2, < 1"
  }

  constraint {
    attribute = "node.meta.disks"
    operator  = "set_contains"
    value     = "ssd,nvme"
  }

  constraint {
    attribute = "node.meta.gpu"
    operator  = "is_not_set"
  }

  constraint {
    attribute = "node.datacenter"
    operator  = "=" # the same as "=="
    value     = "dc1"
  }

  affinity {
    attribute = "node.meta.disk"
    operator  = "==~"
    value     = "ssd"
    weight    = 80
  }

  affinity {
    attribute = "service.mysql"
    operator  = "!=~"
  }

  spread {
    attribute = "node.meta.zone"
    weight    = 70

    target "z1" {
      percent = 50
    }

    target "z2" {
      percent = 30
    }
  }

  spread {
    attribute = "node.datacenter"
  }

  max_per_node        = 2
  stop_after          = "30s"
  scheduler_algorithm = "spread"

  restart {
    on_exhausted = "reschedule"
  }

  reschedule {
    attempts        = 5
    interval        = "1h"
    delay           = "10s"
    delay_function  = "fibonacci"
    max_delay       = "10m"
    penalty         = "1h"
    node_lost_after = "1m"
  }

  update {
    max_parallel      = 2
    health_check      = "running"
    min_healthy_time  = "30s"
    healthy_deadline  = "2m"
    progress_deadline = "0s" # the first unhealthy instance fails the deployment
    canary            = 1
    auto_promote      = true
    auto_revert       = true
  }
}

# One active instance anywhere, stopped when its node is cut off.
service "scheduler" {
  command   = ["/srv/scheduler"]
  count     = 1
  exclusive = true

  constraint {
    attribute = "node.name"
    operator  = "regexp"
    value     = "^sched-[0-9]+$"
  }
}

# The shop and its worker move as one, next to a redis.
group "shop" {
  count = 2

  constraint {
    attribute = "service.redis"
  }

  affinity {
    attribute = "node.meta.rack"
    value     = "r1"
  }

  reschedule {
    attempts = 2
    interval = "30m"
  }

  update {
    health_check = "manual"
    auto_revert  = true
  }

  service "shop" {
    command = ["/srv/shop"]
    port    = 8000

    restart {
      on_exhausted = "reschedule"
    }
  }

  service "shop-worker" {
    command = ["/srv/shop", "worker"]
  }
}
