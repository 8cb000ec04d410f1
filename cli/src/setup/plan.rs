//! What one run of `setup` does: a plan worked out in full before
//! anything is written (so a file that can't be parsed stops the command
//! with nothing changed), then carried out file by file, each with its
//! record.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use agentmesh_node::home::Home;
use serde::Serialize;

use super::files::{self, FileRecord, Records};
use super::{Agent, Ours, Scope, Target, claude, codex, utf8, which};

/// What happens to a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    /// agentmesh creates it.
    Created,
    /// agentmesh's entries go into it.
    Merged,
    /// Its bytes from before agentmesh are put back.
    Restored,
    /// agentmesh created it, and it goes.
    Removed,
    /// Only agentmesh's entries come out (it was changed since).
    Unmerged,
    /// Nothing to do.
    Unchanged,
}

impl Action {
    /// Its name, as `--json` gives it.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Action::Created => "created",
            Action::Merged => "merged",
            Action::Restored => "restored",
            Action::Removed => "removed",
            Action::Unmerged => "unmerged",
            Action::Unchanged => "unchanged",
        }
    }
}

impl Serialize for Action {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// What happens to agentmesh's record of a file.
#[derive(Debug, Clone)]
pub(super) enum RecordUpdate {
    Keep,
    Save(Box<FileRecord>),
    Forget,
}

/// One file's part of a plan.
#[derive(Debug, Clone)]
pub(super) struct FileChange {
    pub(super) path: PathBuf,
    pub(super) action: Action,
    pub(super) before: Option<Vec<u8>>,
    pub(super) after: Option<Vec<u8>>,
    pub(super) record: RecordUpdate,
}

/// Everything a run will do, worked out before anything is written.
#[derive(Debug, Default)]
pub(super) struct Plan {
    pub(super) files: Vec<FileChange>,
    pub(super) commands: Vec<claude::CliCommand>,
    pub(super) notes: Vec<String>,
}

impl Plan {
    pub(super) fn is_empty(&self) -> bool {
        self.commands.is_empty() && self.files.iter().all(|f| f.action == Action::Unchanged)
    }
}

/// One setup: an agent at a scope, for one agentmesh home.
#[derive(Debug)]
pub(super) struct Setup {
    pub(super) agent: Agent,
    pub(super) scope: Scope,
    pub(super) owner: String,
    pub(super) records: Records,
    pub(super) ours: Ours,
    /// `claude` on the PATH (Claude Code only).
    pub(super) claude: Option<PathBuf>,
}

impl Setup {
    pub(super) fn new(
        home: &Home,
        agent: Agent,
        scope: Scope,
        agent_home: Option<&Path>,
    ) -> anyhow::Result<Setup> {
        Ok(Setup {
            agent,
            owner: scope.owner(agent),
            scope,
            records: Records::of(home),
            ours: Ours::new(agent, agent_home)?,
            claude: (agent == Agent::Claude).then(|| which("claude")).flatten(),
        })
    }

    /// Whether the MCP server goes through `claude mcp add`.
    fn registers(&self) -> bool {
        self.claude.is_some() && matches!(self.scope, Scope::User)
    }

    fn targets(&self) -> anyhow::Result<Vec<Target>> {
        match self.agent {
            Agent::Claude => claude::targets(&self.scope, self.registers()),
            Agent::Codex => codex::targets(&self.scope),
        }
    }

    pub(super) fn plan_install(&self) -> anyhow::Result<Plan> {
        let mut plan = Plan::default();
        if self.registers() {
            plan.commands = claude::register(&self.ours.server_line())?;
        }
        for t in self.targets()? {
            plan.files.push(self.install_file(&t)?);
        }
        if !plan.is_empty() {
            plan.notes = match self.agent {
                Agent::Claude => claude::notes(&self.scope, self.registers())?,
                Agent::Codex => codex::notes(&self.scope),
            };
        }
        Ok(plan)
    }

    fn install_file(&self, t: &Target) -> anyhow::Result<FileChange> {
        let path = files::resolve(&t.path);
        let before = files::read(&path)?;
        let text = utf8(&path, before.as_deref())?;
        let after = t.kind.install(&path, text, &self.ours)?;
        let changed = text != Some(after.as_str());
        let record = match self.records.file(&path)? {
            None if !changed => RecordUpdate::Keep,
            None => RecordUpdate::Save(Box::new(FileRecord::new(
                &path,
                t.kind,
                before.as_deref(),
                &self.owner,
            ))),
            Some(mut r) => {
                let mut save = changed;
                if !r.wrote(before.as_deref()) && changed {
                    if text.is_some_and(|tx| t.kind.has_ours(&path, tx)) {
                        // Edited by someone since, with agentmesh's entries
                        // still in: putting the old bytes back would lose
                        // those edits.
                        r.byte_exact = false;
                    } else {
                        // Nothing of agentmesh's is left: the file as it is
                        // now is the one to give back.
                        r = FileRecord::new(&path, t.kind, before.as_deref(), &self.owner);
                    }
                }
                if !r.owners.contains(&self.owner) {
                    r.owners.push(self.owner.clone());
                    save = true;
                }
                if save {
                    RecordUpdate::Save(Box::new(r))
                } else {
                    RecordUpdate::Keep
                }
            }
        };
        let action = match (changed, &before) {
            (false, _) => Action::Unchanged,
            (true, None) => Action::Created,
            (true, Some(_)) => Action::Merged,
        };
        Ok(FileChange {
            path,
            action,
            after: changed.then(|| after.into_bytes()),
            before,
            record,
        })
    }

    pub(super) fn plan_uninstall(&self) -> anyhow::Result<Plan> {
        let mut plan = Plan::default();
        if self.agent == Agent::Claude && matches!(self.scope, Scope::User) {
            let commands = claude::unregister(&self.records)?;
            if self.claude.is_some() {
                plan.commands = commands;
            } else if !commands.is_empty() {
                plan.notes.push(
                    "Claude Code lists the agentmesh MCP server in its user config, but `claude` is not on the PATH to remove it: run `claude mcp remove --scope user agentmesh`".into(),
                );
            }
        }
        let mut seen = BTreeSet::new();
        for r in self.records.files_of(&self.owner)? {
            seen.insert(r.path.clone());
            plan.files
                .push(self.uninstall_recorded(r, &mut plan.notes)?);
        }
        // Files of this scope agentmesh has no record of (set up from
        // another home, or by hand): only its entries come out. A user
        // setup's fallback .mcp.json is a project file, left alone.
        let targets = match self.agent {
            Agent::Claude => claude::targets(&self.scope, true)?,
            Agent::Codex => codex::targets(&self.scope)?,
        };
        for t in targets {
            let path = files::resolve(&t.path);
            if seen.contains(&path) || self.records.file(&path)?.is_some() {
                continue;
            }
            let Some(before) = files::read(&path)? else {
                continue;
            };
            let Some(text) = utf8(&path, Some(&before))? else {
                continue;
            };
            if !t.kind.has_ours(&path, text) {
                continue;
            }
            let after = t.kind.remove(&path, text)?;
            plan.notes.push(format!(
                "agentmesh has no record of {} from before it was set up (set up with another agentmesh home?), so only agentmesh's entries were taken out of it",
                path.display()
            ));
            plan.files.push(FileChange {
                path,
                action: Action::Unmerged,
                before: Some(before),
                after: Some(after.into_bytes()),
                record: RecordUpdate::Keep,
            });
        }
        Ok(plan)
    }

    fn uninstall_recorded(
        &self,
        mut r: FileRecord,
        notes: &mut Vec<String>,
    ) -> anyhow::Result<FileChange> {
        let path = r.path.clone();
        let before = files::read(&path)?;
        let change = |action, after: Option<Vec<u8>>, record| FileChange {
            path: path.clone(),
            action,
            before: before.clone(),
            after,
            record,
        };
        if r.owners.len() > 1 {
            r.owners.retain(|o| *o != self.owner);
            notes.push(format!(
                "{} is kept as it is: agentmesh's entries there are still used by `{}`",
                path.display(),
                r.owners.join("`, `")
            ));
            return Ok(change(
                Action::Unchanged,
                None,
                RecordUpdate::Save(Box::new(r)),
            ));
        }
        if r.byte_exact && r.wrote(before.as_deref()) {
            return Ok(if r.existed {
                change(
                    Action::Restored,
                    Some(r.original_bytes()?),
                    RecordUpdate::Forget,
                )
            } else {
                change(Action::Removed, None, RecordUpdate::Forget)
            });
        }
        let Some(bytes) = &before else {
            notes.push(format!("{} was already gone", path.display()));
            return Ok(change(Action::Unchanged, None, RecordUpdate::Forget));
        };
        let text = utf8(&path, Some(bytes))?.unwrap_or_default();
        let after = r.kind.remove(&path, text)?;
        if after == text {
            return Ok(change(Action::Unchanged, None, RecordUpdate::Forget));
        }
        notes.push(format!(
            "{} was changed since agentmesh wrote it, so it could not be restored byte for byte: only agentmesh's entries were taken out",
            path.display()
        ));
        Ok(if !r.existed && r.kind.is_empty(&path, &after) {
            change(Action::Removed, None, RecordUpdate::Forget)
        } else {
            change(
                Action::Unmerged,
                Some(after.into_bytes()),
                RecordUpdate::Forget,
            )
        })
    }

    /// Carries a plan out: the agent's own commands first (the likeliest
    /// to fail), then the files, each with its record.
    pub(super) fn apply(&self, plan: &Plan) -> anyhow::Result<()> {
        if let Some(program) = &self.claude {
            for c in &plan.commands {
                claude::run(program, c, &self.records)?;
            }
        }
        // Folders agentmesh created, removed once all the files are (two
        // files can share one).
        let mut created_dirs = vec![];
        for f in &plan.files {
            let mut record = f.record.clone();
            match (f.action, &f.after) {
                (Action::Unchanged, _) => {}
                (Action::Removed, _) => {
                    if let Err(e) = std::fs::remove_file(&f.path)
                        && e.kind() != std::io::ErrorKind::NotFound
                    {
                        return Err(anyhow::Error::new(e)
                            .context(format!("cannot remove {}", f.path.display())));
                    }
                    if let Some(r) = self.records.file(&f.path)? {
                        created_dirs.extend(r.created_dirs);
                    }
                }
                (_, Some(after)) => {
                    let made = files::create_parents(&f.path)?;
                    files::write_atomic(&f.path, after, None)?;
                    if let RecordUpdate::Save(r) = &mut record {
                        r.written_sha256 = files::sha256_hex(after);
                        if f.action == Action::Created && r.created_dirs.is_empty() {
                            r.created_dirs = made;
                        }
                    }
                }
                (_, None) => {}
            }
            match &record {
                RecordUpdate::Keep => {}
                RecordUpdate::Save(r) => self.records.save_file(r)?,
                RecordUpdate::Forget => self.records.forget_file(&f.path)?,
            }
        }
        files::remove_created_dirs(created_dirs);
        Ok(())
    }
}
