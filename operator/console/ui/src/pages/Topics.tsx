import { useState } from 'react';
import { Button, OverflowMenu, OverflowMenuItem, Search, Tag } from '@carbon/react';
import { Add } from '@carbon/icons-react';
import type { Channel, PreviewRequest, Snapshot, Topic } from '../api';
import { PhaseTag, SimpleTable, YesNo } from '../components';
import { bytes, count } from '../format';
import { useI18n, type MessageKey } from '../i18n';
import { useManagement } from '../management';

type Action = PreviewRequest['action'];

function Actions({
  kind,
  topic,
  channel,
  paused,
  phase,
}: {
  kind: 'topic' | 'channel';
  topic: string;
  channel: string | null;
  paused: boolean;
  phase: string | null | undefined;
}) {
  const { t } = useI18n();
  const { act } = useManagement();
  const actions: Action[] =
    phase === 'FAILED' ? ['retry'] : [paused ? 'unpause' : 'pause', 'empty', 'delete'];
  const subject = channel ? `${topic}/${channel}` : topic;
  return (
    <OverflowMenu
      size="sm"
      flipped
      aria-label={t('mgmt.actionsFor', { subject })}
      iconDescription={t('mgmt.actionsFor', { subject })}
      data-testid={`actions-${subject}`}
    >
      {actions.map((a) => (
        <OverflowMenuItem
          key={a}
          itemText={t(`action.${a}` as MessageKey)}
          isDelete={a === 'delete'}
          onClick={() => act({ kind, action: a, topic, channel })}
        />
      ))}
    </OverflowMenu>
  );
}

export default function Topics({ s }: { s: Snapshot }) {
  const { t, locale } = useI18n();
  const { status, create } = useManagement();
  const [filter, setFilter] = useState('');
  const managing = Boolean(status?.enabled);
  const topics = s.topics.filter((tp) => tp.name.includes(filter));
  const channels = topics.flatMap((tp) => tp.channels.map((c) => ({ topic: tp, c })));
  const owners = (o: string[]) => o.join(', ');
  const topicCols = [
    { key: 'name', header: t('col.topic'), cell: (tp: Topic) => tp.name },
    { key: 'owners', header: t('col.owners'), cell: (tp: Topic) => owners(tp.owners) },
    { key: 'stored', header: t('col.stored'), cell: (tp: Topic) => count(tp.stored_messages, locale) },
    { key: 'segments', header: t('col.segments'), cell: (tp: Topic) => `${count(tp.segment_count, locale)} (${bytes(tp.segment_bytes)})` },
    { key: 'paused', header: t('col.paused'), cell: (tp: Topic) => <YesNo value={tp.paused} /> },
    { key: 'phase', header: t('col.managed'), cell: (tp: Topic) => <PhaseTag value={tp.managed_phase} empty={t('topics.notManaged')} /> },
  ];
  const channelCols = [
    { key: 'topic', header: t('col.topic'), cell: (r: { topic: Topic; c: Channel }) => r.topic.name },
    { key: 'channel', header: t('col.channel'), cell: (r: { topic: Topic; c: Channel }) => (
      <>
        {r.c.name} {r.c.ephemeral && <Tag size="sm" type="cool-gray">{t('topics.ephemeral')}</Tag>}
      </>
    ) },
    { key: 'owners', header: t('col.owners'), cell: (r: { topic: Topic; c: Channel }) => owners(r.c.owners) },
    { key: 'depth', header: t('col.depth'), cell: (r: { topic: Topic; c: Channel }) => count(r.c.depth, locale) },
    { key: 'inflight', header: t('col.inFlight'), cell: (r: { topic: Topic; c: Channel }) => count(r.c.in_flight, locale) },
    { key: 'deferred', header: t('col.deferred'), cell: (r: { topic: Topic; c: Channel }) => count(r.c.deferred, locale) },
    { key: 'ackgap', header: t('col.ackGap'), cell: (r: { topic: Topic; c: Channel }) => count(r.c.ack_gap, locale) },
    { key: 'paused', header: t('col.paused'), cell: (r: { topic: Topic; c: Channel }) => <YesNo value={r.c.paused} /> },
    { key: 'phase', header: t('col.managed'), cell: (r: { topic: Topic; c: Channel }) => <PhaseTag value={r.c.managed_phase} empty={t('topics.notManaged')} /> },
  ];
  if (managing) {
    topicCols.push({
      key: 'actions',
      header: t('col.actions'),
      cell: (tp: Topic) => (
        <Actions kind="topic" topic={tp.name} channel={null} paused={tp.paused} phase={tp.managed_phase} />
      ),
    });
    channelCols.push({
      key: 'actions',
      header: t('col.actions'),
      cell: (r: { topic: Topic; c: Channel }) =>
        r.c.ephemeral ? (
          <span className="rq-unavailable">{t('topics.unmanaged')}</span>
        ) : (
          <Actions kind="channel" topic={r.topic.name} channel={r.c.name} paused={r.c.paused} phase={r.c.managed_phase} />
        ),
    });
  }
  return (
    <div className="rq-page" data-testid="page-topics">
      <h1>{t('nav.topics')}</h1>
      <div className="rq-toolbar">
        <Search
          size="md"
          labelText={t('topics.filter')}
          placeholder={t('topics.filter')}
          value={filter}
          onChange={(e) => setFilter(e.target.value)}
          closeButtonLabelText={t('topics.clear')}
        />
        {managing && (
          <>
            <Button kind="primary" size="md" renderIcon={Add} onClick={() => create('topic')} data-testid="create-topic">
              {t('mgmt.createTopic')}
            </Button>
            <Button kind="tertiary" size="md" renderIcon={Add} onClick={() => create('channel')} data-testid="create-channel">
              {t('mgmt.createChannel')}
            </Button>
          </>
        )}
      </div>
      <SimpleTable
        title={t('topics.topics')}
        rows={topics}
        rowKey={(tp) => tp.name}
        empty={t('topics.none')}
        columns={topicCols}
        testid="topics-table"
      />
      <h2>{t('topics.channels')}</h2>
      <SimpleTable
        rows={channels}
        rowKey={(r) => `${r.topic.name}/${r.c.name}`}
        empty={t('topics.noChannels')}
        columns={channelCols}
        testid="channels-table"
      />
    </div>
  );
}
