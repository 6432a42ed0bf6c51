# A MySQL primary/replica pair: every node runs mysqld; the instance holding
# the lock is tagged "primary" (primary.mysql.service.consul), the others
# "replica". On a change of leadership the child gets SIGUSR1 and reconfigures.
service "mysql" {
  command = ["/usr/sbin/mysqld", "--defaults-file=/etc/mysql/my.cnf"]
  port    = 3306
  tags    = ["db"]

  check "tcp" {
    tcp      = "127.0.0.1:3306"
    interval = "5s"
    timeout  = "2s"
  }

  leader {
    mode         = "tag"
    tag          = "primary"
    follower_tag = "replica"
    session_ttl  = "15s"
    lock_delay   = "2s"
    change_mode  = "signal"
    signal       = "SIGUSR1"
  }

  restart {
    grace = "60s"
  }

  stop {
    timeout = "2m"
  }
}
