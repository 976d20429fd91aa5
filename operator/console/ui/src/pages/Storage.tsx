import { SimpleBarChart, ScaleTypes } from '@carbon/charts-react';
import '@carbon/charts-react/styles.css';
import type { HistogramSnapshot, Snapshot } from '../api';
import { Figure, SimpleTable, useChartTheme } from '../components';
import { bytes, count, percent, quantileBound, seconds } from '../format';
import { useI18n, type MessageKey } from '../i18n';

const HISTOGRAMS = ['fsync', 'group_commit_wait', 'payload_read', 'scrub', 'gc'] as const;

export default function StoragePage({ s }: { s: Snapshot }) {
  const { t, locale } = useI18n();
  const theme = useChartTheme();
  const st = s.storage;
  const disks = s.brokers
    .filter((b) => b.observation?.disk)
    .map((b) => ({ group: b.name, value: b.observation!.disk!.used_percent }));
  const hists = HISTOGRAMS.map((name) => ({ name, h: st[name] })).filter(
    (x): x is { name: (typeof HISTOGRAMS)[number]; h: HistogramSnapshot } => Boolean(x.h),
  );
  return (
    <div className="rq-page" data-testid="page-storage">
      <h1>{t('nav.storage')}</h1>
      <div className="rq-tiles">
        <Figure label={t('storage.total')} value={bytes(st.total_bytes)} />
        <Figure label={t('storage.available')} value={bytes(st.available_bytes)} />
        <Figure label={t('storage.used')} value={percent(st.used_percent)} />
        <Figure label={t('storage.segments')} value={count(st.segment_count, locale)} />
        <Figure label={t('storage.segmentBytes')} value={bytes(st.segment_bytes)} />
        <Figure label={t('storage.pressure')} value={count(st.pressure_brokers?.length, locale)} />
      </div>
      <h2>{t('storage.perBroker')}</h2>
      {disks.length === 0 ? (
        <p className="rq-unavailable">{t('common.unavailable')}</p>
      ) : (
        <div className="rq-chart" data-testid="chart-disk">
          <SimpleBarChart
            data={disks}
            options={{
              title: t('storage.perBrokerTitle'),
              axes: {
                left: { mapsTo: 'value', scaleType: ScaleTypes.LINEAR, title: t('unit.percent'), domain: [0, 100] },
                bottom: { mapsTo: 'group', scaleType: ScaleTypes.LABELS, title: t('col.broker') },
              },
              height: '260px',
              theme,
              animations: false,
              toolbar: { enabled: false },
            }}
          />
        </div>
      )}
      <h2>{t('storage.latency')}</h2>
      <SimpleTable
        rows={hists}
        rowKey={(x) => x.name}
        empty={t('common.unavailable')}
        testid="histograms"
        columns={[
          { key: 'name', header: t('col.histogram'), cell: (x) => t(`hist.${x.name}` as MessageKey) },
          { key: 'count', header: t('col.count'), cell: (x) => count(x.h.count, locale) },
          { key: 'p50', header: 'p50 ≤', cell: (x) => seconds(quantileBound(x.h, 0.5)) },
          { key: 'p99', header: 'p99 ≤', cell: (x) => seconds(quantileBound(x.h, 0.99)) },
          { key: 'mean', header: t('col.mean'), cell: (x) => seconds(x.h.count > 0 ? x.h.sum_seconds / x.h.count : null) },
        ]}
      />
    </div>
  );
}
