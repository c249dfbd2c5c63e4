//! The front ends' requests, as gangd serves them: submit (checked
//! against gangd's limits, the cluster's state and the allocator), kill,
//! signal, suspend, resume, attach (which waits for adoption just after a
//! restart), ps, matrix, trace. A request about a job is allowed to its
//! owner and root only. A front end that goes away takes its jobs with it.
//!
//! Known faults: a job's output goes to its one attached front end; a
//! second Attach takes it over silently.

use log::{info, warn};

use crate::alloc::{AllocError, JobSpec, JobState as AllocState};
use gang_wire::proto::{FromClient, JobId, JobInfo, JobLimits, JobState, ToClient};

use super::jobs::{Job, Phase};
use super::net::{ConnId, Cred};
use super::{user_name, Coordinator, ADOPTION_GRACE};

impl Coordinator {
    pub(super) fn reply(&self, conn: ConnId, msg: ToClient) {
        if let Some((o, _)) = self.clients.get(&conn) {
            o.send(&msg);
        }
    }

    pub(super) fn on_client_message(&mut self, conn: ConnId, msg: FromClient) {
        let Some(&(_, cred)) = self.clients.get(&conn) else {
            return;
        };
        match msg {
            FromClient::Submit {
                name,
                ranks,
                per_node,
                argv,
                env,
                cwd,
                label_output,
                ship_executable,
                limits,
            } => {
                let _ = label_output; // the front end labels lines itself
                let r = self.submit(
                    conn,
                    cred,
                    name,
                    ranks,
                    per_node,
                    argv,
                    env,
                    cwd,
                    ship_executable,
                    limits,
                );
                if let Err(reason) = r {
                    info!("submission by uid {} refused: {reason}", cred.uid);
                    self.reply(conn, ToClient::Refused { reason });
                }
            }
            FromClient::Kill { job } => self.on_job_request(conn, cred, job, |co, job, who| {
                co.end_by_request(job, who);
                Ok(())
            }),
            FromClient::Signal { job, signal } => {
                self.on_job_request(conn, cred, job, move |co, job, _| {
                    if !(1..=64).contains(&signal) {
                        return Err(format!("{signal} is not a signal number"));
                    }
                    co.kill_job(job, signal);
                    Ok(())
                })
            }
            FromClient::Suspend { job } => {
                self.on_job_request(conn, cred, job, |co, job, _| co.suspend(job, true))
            }
            FromClient::Resume { job } => {
                self.on_job_request(conn, cred, job, |co, job, _| co.suspend(job, false))
            }
            FromClient::Attach { job }
                if !self.jobs.contains_key(&job) && self.epoch.elapsed() < ADOPTION_GRACE =>
            {
                // Just restarted: the job may come back with its nodes.
                self.pending_attach.push((conn, job));
            }
            FromClient::Attach { job } => self.on_job_request(conn, cred, job, |co, job, _| {
                if let Some(j) = co.jobs.get_mut(&job) {
                    j.client = Some(conn);
                }
                Ok(())
            }),
            FromClient::Ps => {
                let jobs = self.ps();
                self.reply(conn, ToClient::PsReply { jobs });
            }
            FromClient::Matrix => {
                let text = self.alloc.render();
                self.reply(conn, ToClient::MatrixReply { text });
            }
            FromClient::Trace { ms } => self.start_trace(conn, cred, ms),
        }
    }

    /// A request about one job, allowed to its owner and root only.
    pub(super) fn on_job_request(
        &mut self,
        conn: ConnId,
        cred: Cred,
        job: JobId,
        act: impl FnOnce(&mut Self, JobId, String) -> Result<(), String>,
    ) {
        let owner = match self.jobs.get(&job) {
            None => {
                return self.reply(
                    conn,
                    ToClient::Refused {
                        reason: format!("no job {job}"),
                    },
                )
            }
            Some(j) => j.cred.uid,
        };
        if cred.uid != 0 && cred.uid != owner {
            warn!("uid {} may not act on job {job} of uid {owner}", cred.uid);
            return self.reply(
                conn,
                ToClient::Refused {
                    reason: format!("job {job} belongs to another user"),
                },
            );
        }
        match act(self, job, user_name(cred.uid)) {
            Ok(()) => self.reply(conn, ToClient::Done),
            Err(reason) => self.reply(conn, ToClient::Refused { reason }),
        }
    }

    pub(super) fn client_gone(&mut self, conn: ConnId) {
        self.clients.remove(&conn);
        let followed: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.client == Some(conn))
            .map(|(&k, _)| k)
            .collect();
        for job in followed {
            if let Some(j) = self.jobs.get_mut(&job) {
                j.client = None;
            }
            info!("the front end of job {job} went away: killing the job");
            self.end_by_request(job, "its front end exiting".into());
        }
        self.traces.retain(|_, t| t.client != conn);
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn submit(
        &mut self,
        conn: ConnId,
        cred: Cred,
        name: String,
        ranks: u32,
        per_node: Option<u32>,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        cwd: String,
        ship_executable: bool,
        limits: JobLimits,
    ) -> Result<(), String> {
        if let Some(why) = limits.beyond(&self.cfg.max_job_limits) {
            return Err(why);
        }
        if ship_executable {
            return Err("shipping the executable is not supported: the program must exist at the same path on every node".into());
        }
        if argv.is_empty() || argv[0].is_empty() {
            return Err("no program given".into());
        }
        if cred.uid < self.cfg.min_rank_uid {
            return Err(format!(
                "uid {} may not run jobs: ranks run as users from uid {} up (gangd --min-rank-uid)",
                cred.uid, self.cfg.min_rank_uid
            ));
        }
        if self.nodes.len() < self.cfg.min_nodes {
            return Err(format!(
                "the cluster is not up yet: {} of {} nodes have joined",
                self.nodes.len(),
                self.cfg.min_nodes
            ));
        }
        if !self.adoption_over {
            return Err(format!(
                "gangd has just restarted and is taking back the running jobs from its nodes; \
                 jobs are accepted within {} s",
                ADOPTION_GRACE
                    .saturating_sub(self.epoch.elapsed())
                    .as_secs()
                    + 1
            ));
        }
        // Recorded before it is handed out: an id is never given twice,
        // even across restarts (state.rs).
        self.state
            .reserve_ids_below(self.alloc.next_id() + 1)
            .map_err(|e| format!("gangd cannot record job ids ({e}); no job is accepted"))?;
        self.submissions += 1;
        let internal = format!("{name}#{}", self.submissions);
        let id = self
            .alloc
            .submit(JobSpec {
                name: internal.clone(),
                ranks,
                per_node,
            })
            .map_err(|e| match e {
                AllocError::BadName { .. } => format!(
                    "bad job name {name:?}: {}",
                    e.to_string().split(": ").last().unwrap_or("")
                ),
                e => e
                    .to_string()
                    .replace(&format!("{internal:?}"), &format!("{name:?}"))
                    .replace(&internal, &name),
            })?;
        info!(
            "job {id} ({name}, {ranks} ranks) submitted by uid {}",
            cred.uid
        );
        self.jobs.insert(
            id,
            Job {
                client: Some(conn),
                limits,
                ..Job::new(name, cred, ranks, argv, env, cwd)
            },
        );
        if self
            .alloc
            .job(id)
            .is_some_and(|v| v.state == AllocState::Queued)
        {
            // Accepted now; it starts when room appears.
            self.jobs.get_mut(&id).unwrap().accepted = true;
            self.reply(conn, ToClient::Accepted { job: id });
        }
        self.placement_changed();
        self.publish_status();
        Ok(())
    }

    pub(super) fn ps(&self) -> Vec<JobInfo> {
        self.jobs
            .iter()
            .map(|(&id, j)| {
                let view = self.alloc.job(id);
                let state = match view.as_ref().map(|v| v.state) {
                    Some(AllocState::Suspended) => JobState::Suspended,
                    Some(AllocState::Running) if j.phase == Phase::Started => JobState::Running,
                    _ => JobState::Queued,
                };
                let nodes = j
                    .nodes()
                    .iter()
                    .filter_map(|n| self.node_name(*n))
                    .collect();
                JobInfo {
                    job: id,
                    name: j.name.clone(),
                    uid: j.cred.uid,
                    ranks: j.ranks,
                    state,
                    slot: view.and_then(|v| v.slot).map(|s| s as u32),
                    nodes,
                    elapsed_ms: j.submitted.elapsed().as_millis() as u64,
                }
            })
            .collect()
    }
}
