service "web" {                # ERROR: Duplicate service name
  command = ["b"]
  template {
    contents    = "b"
    destination = "/etc/web.conf" # ERROR: Duplicate template destination
  }
}

group "g" {                    # ERROR: Duplicate group name
  service "g2" {
    command = ["x"]
    id      = "shared-id"
  }
  service "g3" {
    command = ["x"]
    id      = "shared-id"      # ERROR: Duplicate service ID
  }
}
