BEGIN TRANSACTION;

CREATE TABLE scheduled_tasks_version (
    version_num VARCHAR(32) NOT NULL, 
    CONSTRAINT scheduled_tasks_version_pkc PRIMARY KEY (version_num)
);

GO

-- Running upgrade  -> dbscheduler_0001

CREATE TABLE scheduled_tasks (
    id BIGINT NOT NULL IDENTITY, 
    queue_name NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL, 
    payload NVARCHAR(max) NULL, 
    created_at DATETIME2(6) NOT NULL, 
    next_process_at DATETIME2(6) NOT NULL, 
    attempt INTEGER NOT NULL DEFAULT 0, 
    reenqueue_attempt BIGINT NOT NULL DEFAULT 0, 
    total_attempt BIGINT NOT NULL DEFAULT 0, 
    paused BIT NOT NULL DEFAULT 0, 
    locked_by NVARCHAR(255) NULL, 
    heartbeat_at DATETIME2(6) NULL, 
    last_started_at DATETIME2(6) NULL, 
    last_finished_at DATETIME2(6) NULL, 
    last_status NVARCHAR(16) NULL, 
    last_error NVARCHAR(2000) NULL, 
    schedule NVARCHAR(500) NULL, 
    stop_requested BIT NOT NULL DEFAULT 0, 
    PRIMARY KEY (id), 
    CONSTRAINT scheduled_tasks_uq UNIQUE (queue_name)
);

GO

CREATE INDEX scheduled_tasks_next_idx ON scheduled_tasks (next_process_at);

GO

INSERT INTO scheduled_tasks_version (version_num) VALUES ('dbscheduler_0001');

GO

COMMIT;

GO

