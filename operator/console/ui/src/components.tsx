import { createContext, useContext, type ReactNode } from 'react';
import {
  Table,
  TableBody,
  TableCell,
  TableContainer,
  TableHead,
  TableHeader,
  TableRow,
  Tag,
  Tile,
} from '@carbon/react';
import { UNAVAILABLE } from './format';
import { useI18n } from './i18n';

/** A headline number with its label; an unavailable value is marked as such. */
export function Figure({ label, value, testid }: { label: string; value: string; testid?: string }) {
  const { t } = useI18n();
  return (
    <Tile>
      <div className="rq-figure-label">{label}</div>
      <div className={value === UNAVAILABLE ? 'rq-figure rq-unavailable' : 'rq-figure'} data-testid={testid}>
        {value === UNAVAILABLE ? t('common.unavailable') : value}
      </div>
    </Tile>
  );
}

export interface Column<T> {
  key: string;
  header: string;
  cell: (row: T) => ReactNode;
}

/** A Carbon table; `empty` is shown when there are no rows. */
export function SimpleTable<T>({
  title,
  rows,
  columns,
  rowKey,
  empty,
  testid,
}: {
  title?: string;
  rows: T[];
  columns: Column<T>[];
  rowKey: (row: T) => string;
  empty: string;
  testid?: string;
}) {
  return (
    <TableContainer title={title} data-testid={testid}>
      <Table size="md" useZebraStyles>
        <TableHead>
          <TableRow>
            {columns.map((c) => (
              <TableHeader key={c.key} scope="col">
                {c.header}
              </TableHeader>
            ))}
          </TableRow>
        </TableHead>
        <TableBody>
          {rows.length === 0 ? (
            <TableRow>
              <TableCell colSpan={columns.length}>{empty}</TableCell>
            </TableRow>
          ) : (
            rows.map((r) => (
              <TableRow key={rowKey(r)} data-row={rowKey(r)}>
                {columns.map((c) => (
                  <TableCell key={c.key} data-col={c.key}>
                    {c.cell(r)}
                  </TableCell>
                ))}
              </TableRow>
            ))
          )}
        </TableBody>
      </Table>
    </TableContainer>
  );
}

const PHASE_COLOURS: Record<string, 'green' | 'blue' | 'red' | 'gray' | 'purple' | 'magenta'> = {
  Ready: 'green',
  ACTIVE: 'green',
  True: 'green',
  Progressing: 'blue',
  APPLYING: 'blue',
  PREPARING: 'blue',
  Pending: 'blue',
  Degraded: 'red',
  Failed: 'red',
  FAILED: 'red',
  False: 'red',
  Blocked: 'magenta',
  TOMBSTONED: 'purple',
  Completed: 'green',
  AwaitingCanaryApproval: 'purple',
  Preflight: 'blue',
  WaitingForReady: 'blue',
  Draining: 'blue',
  Replacing: 'blue',
};

/** A phase or status as a coloured tag; `empty` (default "unavailable") when there is none. */
export function PhaseTag({ value, empty }: { value: string | null | undefined; empty?: string }) {
  const { t } = useI18n();
  if (!value) return <span className="rq-unavailable">{empty ?? t('common.unavailable')}</span>;
  return (
    <Tag type={PHASE_COLOURS[value] ?? 'gray'} size="sm">
      {value}
    </Tag>
  );
}

export function YesNo({ value }: { value: boolean | null | undefined }) {
  const { t } = useI18n();
  if (value === null || value === undefined) return <span className="rq-unavailable">{t('common.unavailable')}</span>;
  return <>{value ? t('common.yes') : t('common.no')}</>;
}

/** The Carbon theme in use, for the charts (they take it as an option). */
export const ThemeContext = createContext<'g10' | 'g100'>('g10');

export function useChartTheme(): 'g10' | 'g100' {
  return useContext(ThemeContext);
}

/** Conditions where `True` is bad news. */
const NEGATIVE_CONDITIONS = new Set(['Degraded', 'Blocked', 'StorageBlocked', 'InsufficientNodes']);

/** A condition's status, green when it is the healthy value and red when not. */
export function ConditionTag({ type, status }: { type: string; status: string }) {
  const healthy = NEGATIVE_CONDITIONS.has(type) ? status === 'False' : status === 'True';
  const colour = type === 'Progressing' ? (status === 'True' ? 'blue' : 'gray') : healthy ? 'green' : 'red';
  return (
    <Tag type={colour} size="sm">
      {status}
    </Tag>
  );
}
