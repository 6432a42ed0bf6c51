# Unknown and misplaced names, with did-you-mean, and reserved names.
service "web" {        # ERROR: Missing required argument
  comand  = ["python3"] # ERROR: Unsupported argument
  enviroment = {}       # ERROR: Unsupported argument
  replicas = 3          # ERROR: Unsupported argument

  chek "http" {         # ERROR: Unsupported block type
    http = "http://127.0.0.1/"
  }

  restart {
    polcy = "always"    # ERROR: Unsupported argument
  }

  afinity {}            # ERROR: Unsupported block type

  stop {}
  stop {}               # ERROR: Duplicate stop block

  leader {
    mode = "standby"
    term = 3            # ERROR: Unsupported argument
  }
}

servce "typo" {}        # ERROR: Unsupported block type

service {               # ERROR: Missing name for service
  command = ["x"]
}

service "a" "b" {       # ERROR: Extraneous label for service
  command = ["x"]
}

service "mariposa" {    # ERROR: Reserved service name
  command = ["x"]
}

service "bad.name" {    # ERROR: Invalid service name
  command = ["x"]
}

group "empty" {         # ERROR: Empty group
  count = 2
}

group "g" {
  service "in-group" {
    command = ["x"]
    restart {
      on_exhausted = "reschedule" # ERROR: Reschedule without count
    }
  }
  task "t" {}           # ERROR: Unsupported block type
}
