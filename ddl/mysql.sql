CREATE TABLE scheduled_tasks_version (
    version_num VARCHAR(32) NOT NULL, 
    CONSTRAINT scheduled_tasks_version_pkc PRIMARY KEY (version_num)
);

-- Running upgrade  -> dbscheduler_0001

CREATE TABLE scheduled_tasks (
    id BIGINT NOT NULL AUTO_INCREMENT, 
    queue_name VARCHAR(255) COLLATE utf8mb4_bin NOT NULL, 
    payload TEXT, 
    created_at DATETIME(6) NOT NULL, 
    next_process_at DATETIME(6) NOT NULL, 
    attempt INTEGER NOT NULL DEFAULT 0, 
    reenqueue_attempt BIGINT NOT NULL DEFAULT 0, 
    total_attempt BIGINT NOT NULL DEFAULT 0, 
    paused BOOL NOT NULL DEFAULT 0, 
    locked_by VARCHAR(255), 
    heartbeat_at DATETIME(6), 
    last_started_at DATETIME(6), 
    last_finished_at DATETIME(6), 
    last_status VARCHAR(16), 
    last_error VARCHAR(2000), 
    schedule VARCHAR(500), 
    stop_requested BOOL NOT NULL DEFAULT 0, 
    PRIMARY KEY (id), 
    CONSTRAINT scheduled_tasks_uq UNIQUE (queue_name)
)ENGINE=InnoDB CHARSET=utf8mb4 COLLATE utf8mb4_bin;

CREATE INDEX scheduled_tasks_next_idx ON scheduled_tasks (next_process_at);

INSERT INTO scheduled_tasks_version (version_num) VALUES ('dbscheduler_0001');

