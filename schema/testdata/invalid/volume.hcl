# volume blocks: data that belongs to the slot of a cluster unit.
service "no-count" {
  command = ["x"]

  volume "data" {}              # ERROR: Volume without count
  volume "logs" {}
}

group "no-count-group" {
  volume "data" {}              # ERROR: Volume without count

  service "a" {
    command = ["x"]
  }
}

group "pod" {
  count     = 1
  exclusive = true

  volume "shared" {
    handoff = "snapshot"
  }

  service "b" {
    command = ["x"]

    volume "own" {}             # ERROR: Volume on a group member
  }
}

service "names" {
  command = ["x"]
  count   = 1

  volume "data" {}
  volume "data" {}              # ERROR: Duplicate volume
  volume "my.data" {}           # ERROR: Invalid volume name
  volume "" {}                  # ERROR: Invalid volume name
  volume "web-cache" {}
  volume "web_cache" {}         # ERROR: Duplicate volume variable
  volume "DATA" {}              # ERROR: Duplicate volume variable
}

service "paths" {
  count   = 1
  command = ["x"]

  volume "abs" {
    path = "/var/lib/db"        # ERROR: Invalid volume path
  }
  volume "up" {
    path = "../other"           # ERROR: Invalid volume path
  }
  volume "nested" {
    path = "db/wal"             # ERROR: Invalid volume path
  }
  volume "trailing" {
    path = "db/"                # ERROR: Invalid volume path
  }
  volume "dot" {
    path = "."                  # ERROR: Invalid volume path
  }
  volume "dotdot" {
    path = ".."                 # ERROR: Invalid volume path
  }
  volume "hidden" {
    path = ".snapshots"         # ERROR: Invalid volume path
  }
  volume "aside" {
    path = "db.aside"           # ERROR: Invalid volume path
  }
  volume "restoring" {
    path = "db.restore-1"       # ERROR: Invalid volume path
  }
  volume "space" {
    path = "my data"            # ERROR: Invalid volume path
  }
  volume "empty" {
    path = ""                   # ERROR: Invalid volume path
  }
  volume "db" {
    path = "db"
  }
  volume "db2" {
    path = "db"                 # ERROR: Duplicate volume path
  }
  volume "x" {}
  volume "x2" {
    path = "x"                  # ERROR: Duplicate volume path
  }
  volume "dotted" {
    path = "data.v2"
  }
}

service "values" {
  command   = ["x"]
  count     = 1
  exclusive = true

  volume "a" {
    handoff         = "snapshots" # ERROR: Invalid handoff
    on_missing      = "latests"   # ERROR: Invalid on_missing
    interval        = "0s"        # ERROR: Invalid interval
    restore_timeout = "0s"        # ERROR: Invalid restore_timeout
    replicas        = -1          # ERROR: Invalid replicas
  }
  volume "b" {
    handoff         = "snapshot"
    snapshot        = []          # ERROR: Empty command
    restore         = [""]        # ERROR: Empty command
    interval        = 300         # ERROR: Invalid duration
    restore_timeout = "-1m"       # ERROR: Invalid duration
    on_missing      = ["fail"]    # ERROR: Incorrect attribute value type
    size            = "1G"        # ERROR: Unsupported argument
  }
}

# Only handoff = "snapshot" takes copies.
service "sticky" {
  command = ["x"]
  count   = 1

  volume "a" {
    handoff         = "sticky"
    snapshot        = ["dump"]    # ERROR: snapshot without snapshot handoff
    restore         = ["load"]    # ERROR: restore without snapshot handoff
    replicas        = 1           # ERROR: replicas without snapshot handoff
    interval        = "1m"        # ERROR: interval without snapshot handoff
    restore_timeout = "1m"        # ERROR: restore_timeout without snapshot handoff
    on_missing      = "fail"      # ERROR: on_missing without snapshot handoff
  }
  volume "b" {
    replicas   = 0
    on_missing = "empty"          # ERROR: on_missing without snapshot handoff
  }
}

# The data moves only once it is stopped: an exclusive slot.
service "not-exclusive" {
  command = ["x"]
  count   = 1

  volume "a" {
    handoff = "snapshot"          # ERROR: Snapshot handoff without exclusive
  }
}

group "not-exclusive-group" {
  count     = 2
  exclusive = false

  volume "a" {
    handoff = "snapshot"          # ERROR: Snapshot handoff without exclusive
  }

  service "c" {
    command = ["x"]
  }
}
